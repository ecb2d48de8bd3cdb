package launcher_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher"
	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
	"github.com/mcpwarden/mcpwarden/schema"
)

// secretWorkspace is a write scope holding every kind of secret the fence
// masks: files matching a pattern at the top and deep down, a directory
// matching one, a multi-component pattern, hard links to a secret's bytes
// under harmless names, and a symlink to a secret.
type secretWorkspace struct {
	base, allowed string
	files         map[string]string // relative path -> content, as the test wrote it
}

func newSecretWorkspace(t *testing.T) secretWorkspace {
	t.Helper()
	root := t.TempDir()
	w := secretWorkspace{base: filepath.Join(root, "base")}
	w.allowed = filepath.Join(w.base, "allowed")
	w.files = map[string]string{
		".env":                 "ENV-SECRET-42",
		"src/deep/id_rsa":      "KEY-SECRET-42",
		".ssh/config":          "SSH-SECRET-42",
		".ssh/inner/key":       "SSHKEY-SECRET-42",
		"app/.config/gcloud/t": "GCLOUD-SECRET-42",
		"plain.txt":            "plain",
		"src/main.go":          "package main",
	}
	for rel, c := range w.files {
		testenv.WriteFiles(t, map[string]string{filepath.Join(w.allowed, rel): c})
	}
	// Hard links under harmless names: to a secret file, and to a file
	// inside a secret directory.
	for from, to := range map[string]string{".env": "notes.txt", ".ssh/inner/key": "src/readme.md"} {
		if err := os.Link(filepath.Join(w.allowed, from), filepath.Join(w.allowed, to)); err != nil {
			t.Fatal(err)
		}
	}
	mustSymlink(t, filepath.Join(w.allowed, ".env"), filepath.Join(w.allowed, "env-link"))
	return w
}

// TestFenceSecretsMasked: a server that checks nothing tries to read,
// list, rename, unlink, overwrite and re-link the scope's secrets (the
// proxy refuses them to a client; this server is reached around it).
// With the mount namespace each one is covered by an empty, mode-000,
// read-only mount: every attempt fails and the host files are unchanged,
// while the rest of the workspace works. Without it (Landlock cannot take
// entries out of a granted directory) the secrets layer says degraded,
// with the count, and the operator is warned. Fails on the code before
// (the server reads every secret).
func TestFenceSecretsMasked(t *testing.T) { fencetest.ForEachLayering(t, testFenceSecretsMasked) }

func testFenceSecretsMasked(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newSecretWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"})
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS, AuditLog: log})
	in := func(n string) string { return filepath.Join(w.allowed, n) }
	if r := s.Do(map[string]any{"op": "read", "path": in("plain.txt")}); !r.OK || r.Data != "plain" {
		t.Fatalf("a plain file of the scope: %+v (%s)", r, s.Stderr())
	}
	if noNS {
		// Landlock alone: the secrets stay readable (a Known limit), and
		// the record and the operator say so.
		if r := s.Do(map[string]any{"op": "read", "path": in(".env")}); !r.OK {
			t.Logf("without namespaces .env was refused (%s): fine, but not claimed", r.Errno)
		}
		if code := s.Close(); code != 0 {
			t.Errorf("exit %d: %s", code, s.Stderr())
		}
		ly := layerOf(launchLayers(t, log)[0], schema.LayerSecrets)
		if ly.State != schema.LayerDegraded || ly.Reason != "unmasked=6,no_mount_namespace" {
			t.Errorf("secrets layer %+v, want degraded unmasked=6,no_mount_namespace (.env, id_rsa, .ssh, .config/gcloud, 2 hard links)", ly)
		}
		if !strings.Contains(s.Stderr(), "cannot hide them from the server") {
			t.Errorf("no warning on stderr: %s", s.Stderr())
		}
		return
	}
	masked := []string{"ENOENT", "EACCES", "EPERM"}
	busy := []string{"EBUSY", "EACCES", "EPERM", "EROFS", "EXDEV"}
	var cases []fenceCase
	for _, p := range []string{".env", "src/deep/id_rsa", ".ssh/config", ".ssh/inner/key", "app/.config/gcloud/t", "notes.txt", "src/readme.md", "env-link"} {
		cases = append(cases,
			fenceCase{name: "read " + p, req: map[string]any{"op": "read", "path": in(p)}, errno: masked, exact: true},
			fenceCase{name: "overwrite " + p, req: map[string]any{"op": "write", "path": in(p), "data": "x"}, errno: append([]string{"EROFS"}, masked...), exact: true},
		)
	}
	for _, p := range []string{".env", "src/deep/id_rsa", ".ssh", "app/.config/gcloud", "notes.txt", "src/readme.md"} {
		cases = append(cases,
			fenceCase{name: "rename " + p, req: map[string]any{"op": "rename", "path": in(p), "to": in("moved")}, errno: busy, exact: true},
			fenceCase{name: "unlink " + p, req: map[string]any{"op": "remove", "path": in(p)}, errno: busy, exact: true},
			fenceCase{name: "hard link " + p, req: map[string]any{"op": "link", "path": in(p), "to": in("relinked")}, errno: busy, exact: true},
			fenceCase{name: "rename over " + p, req: map[string]any{"op": "rename", "path": in("plain.txt"), "to": in(p)}, errno: append([]string{"EISDIR", "ENOTDIR", "EEXIST"}, busy...), exact: true},
		)
	}
	cases = append(cases,
		fenceCase{name: "list the secret directory", req: map[string]any{"op": "readdir", "path": in(".ssh")}, errno: masked, exact: true},
		fenceCase{name: "list below it", req: map[string]any{"op": "readdir", "path": in(".ssh/inner")}, errno: masked, exact: true},
		fenceCase{name: "the workspace still lists", req: map[string]any{"op": "readdir", "path": w.allowed}, wantOK: true},
		fenceCase{name: "a new file still works", req: map[string]any{"op": "write", "path": in("new.txt"), "data": "n"}, wantOK: true},
		// Around the mask: unmount it, clone its directory without the
		// mounts below (open_tree without AT_RECURSIVE), ".." from a
		// directory below, an O_PATH descriptor re-opened through
		// /proc/self/fd, a reflink of it.
		fenceCase{name: "umount2 the mask", req: map[string]any{"op": "umount_path", "path": in(".env")}, errno: []string{"EPERM"}, exact: true},
		fenceCase{name: "open_tree its directory", req: map[string]any{"op": "open_tree_path", "path": in(".env")}, errno: []string{"EPERM"}, exact: true},
		fenceCase{name: "dot-dot from below", req: map[string]any{"op": "dotdot_read", "path": in("src"), "name": ".env"}, errno: masked, exact: true},
		fenceCase{name: "O_PATH then /proc/self/fd", req: map[string]any{"op": "procfd_reopen", "path": in(".env")}, errno: masked, exact: true},
		fenceCase{name: "O_PATH then /proc/self/fd, inside .ssh", req: map[string]any{"op": "procfd_reopen", "path": in(".ssh/config")}, errno: masked, exact: true},
		fenceCase{name: "FICLONE it", req: map[string]any{"op": "ficlone", "path": in(".env"), "to": in("clone.txt")}, errno: masked, exact: true},
	)
	runCases(t, s, cases)
	// The server holds no capability (uid 0 of its own user namespace or
	// not): nothing lets it pass a mode-000 mask or touch a mount.
	if r := s.Do(map[string]any{"op": "read", "path": "/proc/self/status"}); !r.OK || !strings.Contains(r.Data, "CapEff:\t0000000000000000") || !strings.Contains(r.Data, "CapPrm:\t0000000000000000") {
		t.Errorf("the server's capabilities: %+v", r)
	}
	if r := s.Do(map[string]any{"op": "readdir", "path": w.allowed}); !r.OK || !strings.Contains(r.Data, ".env") || strings.Contains(r.Data, "mcpwarden") {
		t.Errorf("the workspace's listing: %+v", r)
	}
	if code := s.Close(); code != 0 {
		t.Errorf("exit %d: %s", code, s.Stderr())
	}
	for rel, c := range w.files {
		if data, err := os.ReadFile(in(rel)); err != nil || string(data) != c {
			t.Errorf("%s after the run: %q %v", rel, data, err)
		}
	}
	ly := layerOf(launchLayers(t, log)[0], schema.LayerSecrets)
	if ly.State != schema.LayerOn || ly.Reason != "masked=6" {
		t.Errorf("secrets layer %+v, want on masked=6", ly)
	}
	if strings.Contains(s.Stderr(), "id_rsa") || strings.Contains(s.Stderr(), ".env") {
		t.Errorf("a secret's name on stderr: %s", s.Stderr())
	}
}

// TestFenceSecretsUnmask: --unmask leaves the patterns named visible to the
// server (a git server needs .git); the others stay masked.
func TestFenceSecretsUnmask(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newSecretWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, ExtraArgs: []string{"--unmask", ".ssh"}})
	if r := s.Do(map[string]any{"op": "read", "path": filepath.Join(w.allowed, ".ssh/config")}); !r.OK || r.Data != "SSH-SECRET-42" {
		t.Errorf("unmasked .ssh/config: %+v (%s)", r, s.Stderr())
	}
	if r := s.Do(map[string]any{"op": "read", "path": filepath.Join(w.allowed, ".env")}); r.OK {
		t.Errorf(".env: ESCAPE, read %q", r.Data)
	}
	if code := s.Close(); code != 0 {
		t.Errorf("exit %d: %s", code, s.Stderr())
	}
}

// TestFenceSecretsAsTheProxyMatches: the walk masks what the proxy calls a
// secret, however the scope is cut and the name spelled. The proxy matches
// the absolute path, so a multi-component pattern may start above the
// scope path (a scope at .config holds .config/gcloud; one at etc holds
// etc/shadow), and it refuses "server.pem." and ".env " as the secret
// they spell (trailing dots and spaces). A FIFO and a unix socket with a
// secret's name are masked too, and the launch neither blocks on them nor
// fails. Fails on the code before (the walk matched the path below the
// scope path only, without trimming: the server read all four).
func TestFenceSecretsAsTheProxyMatches(t *testing.T) {
	fencetest.ForEachLayering(t, testFenceSecretsAsTheProxyMatches)
}

func testFenceSecretsAsTheProxyMatches(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	base := filepath.Join(t.TempDir(), "base")
	cfg := filepath.Join(base, "home", ".config")
	etc := filepath.Join(base, "etc")
	secrets := map[string]string{
		filepath.Join(cfg, "gcloud", "token"): "GCLOUD-SECRET-42",
		filepath.Join(cfg, "server.pem."):     "DOT-SECRET-42",
		filepath.Join(cfg, "app", ".env "):    "SPACE-SECRET-42",
		filepath.Join(etc, "shadow"):          "SHADOW-SECRET-42",
	}
	testenv.WriteFiles(t, secrets)
	testenv.WriteFiles(t, map[string]string{filepath.Join(cfg, "app", "settings.json"): "plain", filepath.Join(etc, "hosts"): "hosts"})
	fifo := filepath.Join(cfg, ".env.fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(cfg, "agent.key"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"home/.config", "etc"}})
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: base, NoNamespaces: noNS, AuditLog: log})
	if r := s.Do(map[string]any{"op": "read", "path": filepath.Join(cfg, "app", "settings.json")}); !r.OK || r.Data != "plain" {
		t.Fatalf("a plain file of the scope: %+v (%s)", r, s.Stderr())
	}
	if noNS {
		if code := s.Close(); code != 0 {
			t.Errorf("exit %d: %s", code, s.Stderr())
		}
		ly := layerOf(launchLayers(t, log)[0], schema.LayerSecrets)
		if ly.State != schema.LayerDegraded || ly.Reason != "unmasked=6,no_mount_namespace" {
			t.Errorf("secrets layer %+v, want degraded unmasked=6,no_mount_namespace", ly)
		}
		return
	}
	var cases []fenceCase
	for p := range secrets {
		cases = append(cases, fenceCase{name: "read " + filepath.Base(p), req: map[string]any{"op": "read", "path": p}, errno: []string{"EACCES"}, exact: true})
	}
	cases = append(cases,
		fenceCase{name: "the FIFO", req: map[string]any{"op": "read", "path": fifo}, errno: []string{"EACCES"}, exact: true},
		// open(2) of a socket is ENXIO; of its mask, EACCES.
		fenceCase{name: "the socket", req: map[string]any{"op": "read", "path": filepath.Join(cfg, "agent.key")}, errno: []string{"EACCES"}, exact: true},
		fenceCase{name: "etc/hosts", req: map[string]any{"op": "read", "path": filepath.Join(etc, "hosts")}, wantOK: true, data: "hosts"},
	)
	runCases(t, s, cases)
	if code := s.Close(); code != 0 {
		t.Errorf("exit %d: %s", code, s.Stderr())
	}
	ly := layerOf(launchLayers(t, log)[0], schema.LayerSecrets)
	if ly.State != schema.LayerOn || ly.Reason != "masked=6" {
		t.Errorf("secrets layer %+v, want on masked=6", ly)
	}
}

// TestFenceSecretsRestartKeepsLaunchMasks: a server with a write scope
// fills the scope past the walk's entry bound, then is restarted: the
// restart's walk stops before it reaches the .env the launch masked, and
// the new root must still mask it (the launch's masks are kept); the run
// warns that the walk stopped at a bound. Fails when a restart's walk
// replaces the launch's masks instead of adding to them.
func TestFenceSecretsRestartKeepsLaunchMasks(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	base := filepath.Join(t.TempDir(), "base")
	ws := filepath.Join(base, "allowed")
	env := filepath.Join(ws, "z", ".env")
	testenv.WriteFiles(t, map[string]string{env: "ENV-SECRET-42", filepath.Join(ws, "plain.txt"): "plain"})
	scope := canonicalScope(t, base, map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"})
	cfg, _, _ := inProcessConfig(t, scope, []string{b.Naive})
	cfg.SecretWalkLimit = 10
	stderr := &testenv.LockedBuffer{}
	cfg.Stderr = stderr
	cfg.Mediator = &scripted{t: t, steps: func(ask func(map[string]any) fencetest.Response, up launcher.Upstream) {
		if r := ask(map[string]any{"op": "read", "path": env}); r.OK || r.Errno != "EACCES" {
			t.Fatalf("at launch: %+v, want the .env masked (EACCES)", r)
		}
		for i := 0; i < 20; i++ {
			if r := ask(map[string]any{"op": "write", "path": filepath.Join(ws, fmt.Sprintf("f%02d", i)), "data": "x"}); !r.OK {
				t.Fatalf("write in the scope: %+v", r)
			}
		}
		if err := up.Restart(context.Background(), []schema.CanonicalPath{{Path: ws, Kind: schema.KindDir}}); err != nil {
			t.Fatalf("restart: %v", err)
		}
		if r := ask(map[string]any{"op": "read", "path": env}); r.OK || r.Errno != "EACCES" {
			t.Errorf("after the restart whose walk stopped at its bound: %+v: ESCAPE, want the launch's mask kept (EACCES)", r)
		}
		if r := ask(map[string]any{"op": "read", "path": filepath.Join(ws, "plain.txt")}); !r.OK || r.Data != "plain" {
			t.Errorf("a plain file after the restart: %+v", r)
		}
	}}
	l, err := launcher.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(context.Background()); err != nil {
		t.Fatalf("run: %v", err)
	}
	if !strings.Contains(stderr.String(), "stopped at a bound (walk_bound_entries") {
		t.Errorf("no warning that the restart's walk stopped at its bound: %s", stderr.String())
	}
}

// TestFenceSecretsCommonCredentialFiles: credential files the built-in
// patterns did not name before session 8 — direnv's .envrc and wrangler's
// .dev.vars in a project, a Terraform state backup, the GitHub CLI's token
// (.config/gh/hosts.yml), Vault's token, Terraform's CLI credentials,
// s3cmd's, boto's and Docker's legacy keys, a PuTTY private key, MySQL's
// client password — in a scope at a home directory. With the namespaces
// each is masked (EACCES); without them they are counted as unmasked. On
// main before the patterns, the server read every one of them.
func TestFenceSecretsCommonCredentialFiles(t *testing.T) {
	fencetest.ForEachLayering(t, testFenceSecretsCommonCredentialFiles)
}

func testFenceSecretsCommonCredentialFiles(t *testing.T, noNS bool) {
	testFenceSecretFiles(t, noNS, map[string]string{
		"proj/.envrc":                   "export API_KEY=ENVRC-SECRET-42",
		"proj/.dev.vars":                "TOKEN=DEVVARS-SECRET-42",
		"proj/terraform.tfstate.backup": "TFSTATE-SECRET-42",
		".config/gh/hosts.yml":          "oauth_token: GH-SECRET-42",
		".vault-token":                  "VAULT-SECRET-42",
		".terraformrc":                  "credentials { token = TFRC-SECRET-42 }",
		".s3cfg":                        "secret_key = S3CFG-SECRET-42",
		".boto":                         "aws_secret_access_key = BOTO-SECRET-42",
		".dockercfg":                    "DOCKERCFG-SECRET-42",
		"keys/deploy.ppk":               "PUTTY-SECRET-42",
		".my.cnf":                       "password=MYCNF-SECRET-42",
	})
}

// TestFenceSecretsAgentCredentialFiles (session 9): the credential files
// of the AI agents on the hosts the fence guards, and the other stores
// the built-in patterns did not name, in a scope at a home directory: the
// server read every one of them (the proxy served them to a client). Now
// each is masked with the namespaces (EACCES) and counted unmasked,
// with a warning, under --no-namespaces.
func TestFenceSecretsAgentCredentialFiles(t *testing.T) {
	fencetest.ForEachLayering(t, func(t *testing.T, noNS bool) {
		testFenceSecretFiles(t, noNS, map[string]string{
			".claude/.credentials.json":               `{"claudeAiOauth":{"accessToken":"CLAUDE-SECRET-42"}}`,
			".codex/auth.json":                        `{"OPENAI_API_KEY":"CODEX-SECRET-42"}`,
			".gemini/oauth_creds.json":                `{"refresh_token":"GEMINI-SECRET-42"}`,
			".config/github-copilot/apps.json":        `{"oauth_token":"COPILOT-SECRET-42"}`,
			".cache/huggingface/token":                "HF-SECRET-42",
			".mylogin.cnf":                            "MYLOGIN-SECRET-42",
			"krb/service.keytab":                      "KEYTAB-SECRET-42",
			".config/containers/auth.json":            `{"auths":{"r":{"auth":"PODMAN-SECRET-42"}}}`,
			".config/rclone/rclone.conf":              "pass = RCLONE-SECRET-42",
			".config/sops/age/keys.txt":               "AGE-SECRET-KEY-42",
			".wrangler/config/default.toml":           "oauth_token = WRANGLER-SECRET-42",
			".oci/config":                             "key_file = OCI-SECRET-42",
			".local/share/keyrings/login.keyring":     "KEYRING-SECRET-42",
			".mozilla/firefox/p.default/key4.db":      "FIREFOX-SECRET-42",
			".config/google-chrome/Default/Cookies":   "CHROME-SECRET-42",
			".bash_history":                           "mysql -pHISTORY-SECRET-42",
			".m2/settings-security.xml":               "<master>MAVEN-SECRET-42</master>",
			".config/composer/auth.json":              `{"github-oauth":{"github.com":"COMPOSER-SECRET-42"}}`,
			".local/share/com.vercel.cli/auth.json":   `{"token":"VERCEL-SECRET-42"}`,
			".config/configstore/firebase-tools.json": `{"tokens":{"refresh_token":"FIREBASE-SECRET-42"}}`,
			".databrickscfg":                          "token = DATABRICKS-SECRET-42",
			".config/ngrok/ngrok.yml":                 "authtoken: NGROK-SECRET-42",
		})
	})
}

// testFenceSecretFiles writes secrets (paths relative to a home directory
// that is the scope) and tries to read each through the fence.
func testFenceSecretFiles(t *testing.T, noNS bool, rel map[string]string) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	base := filepath.Join(t.TempDir(), "base")
	home := filepath.Join(base, "home")
	secrets := map[string]string{}
	for p, content := range rel {
		secrets[filepath.Join(home, p)] = content
	}
	testenv.WriteFiles(t, secrets)
	plain := filepath.Join(home, "proj", "README.md")
	testenv.WriteFiles(t, map[string]string{plain: "plain"})
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"home"}})
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: base, NoNamespaces: noNS, AuditLog: log})
	cases := []fenceCase{{name: "a plain file of the scope", req: map[string]any{"op": "read", "path": plain}, wantOK: true, data: "plain"}}
	if !noNS {
		for p := range secrets {
			cases = append(cases, fenceCase{name: "read " + strings.TrimPrefix(p, home), req: map[string]any{"op": "read", "path": p}, errno: []string{"EACCES"}, exact: true})
		}
	}
	runCases(t, s, cases)
	if code := s.Close(); code != 0 {
		t.Errorf("exit %d: %s", code, s.Stderr())
	}
	want := schema.Layer{State: schema.LayerOn, Reason: fmt.Sprintf("masked=%d", len(secrets))}
	if noNS {
		want = schema.Layer{State: schema.LayerDegraded, Reason: fmt.Sprintf("unmasked=%d,no_mount_namespace", len(secrets))}
	}
	if ly := layerOf(launchLayers(t, log)[0], schema.LayerSecrets); ly.State != want.State || ly.Reason != want.Reason {
		t.Errorf("secrets layer %+v, want %s %s", ly, want.State, want.Reason)
	}
}
