// Package promtest runs a real Prometheus server (Debian's prometheus
// 2.42) against a test's metrics endpoints and queries its HTTP API, so a
// test sees its series the way an operator's Prometheus does: scraped,
// parsed, stored, and selected by PromQL.
package promtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// Target is one scrape job: a name and host:port endpoints serving
// /metrics.
type Target struct {
	Job   string
	Addrs []string
}

// Server is one running Prometheus.
type Server struct {
	URL string // http://127.0.0.1:PORT
	log *testenv.LockedBuffer
}

// Start runs Prometheus scraping targets every 500 ms, on a free loopback
// port with its data in a temporary directory, until t ends.
func Start(t *testing.T, targets ...Target) *Server {
	t.Helper()
	bin := testenv.RequireCommand(t, "prometheus")
	dir := t.TempDir()
	var cfg strings.Builder
	cfg.WriteString("global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\n  evaluation_interval: 500ms\nscrape_configs:\n")
	for _, tg := range targets {
		quoted := make([]string, len(tg.Addrs))
		for i, a := range tg.Addrs {
			quoted[i] = strconv.Quote(a)
		}
		fmt.Fprintf(&cfg, "  - job_name: %q\n    static_configs:\n      - targets: [%s]\n", tg.Job, strings.Join(quoted, ", "))
	}
	conf := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(conf, []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	cmd := exec.Command(bin, "--config.file="+conf, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	s := &Server{URL: "http://" + addr, log: &testenv.LockedBuffer{}}
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("prometheus log:\n%s", s.log.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case <-exited:
			t.Fatalf("prometheus exited:\n%s", s.log.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus is not ready after 30 s:\n%s", s.log.String())
		}
	}
}

// Sample is one series of an instant query's result.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Query evaluates a PromQL instant query.
func (s *Server) Query(t *testing.T, expr string) []Sample {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/api/v1/query?query="+url.QueryEscape(expr), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("query %s: %v", expr, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("query %s: %v: %s", expr, err, body)
	}
	if r.Status != "success" {
		t.Fatalf("query %s: %s", expr, r.Error)
	}
	if r.Data.ResultType != "vector" {
		t.Fatalf("query %s: result type %s, want vector", expr, r.Data.ResultType)
	}
	out := make([]Sample, 0, len(r.Data.Result))
	for _, res := range r.Data.Result {
		str, _ := res.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			t.Fatalf("query %s: value %v", expr, res.Value[1])
		}
		out = append(out, Sample{Labels: res.Metric, Value: v})
	}
	return out
}

// WaitFor evaluates expr until it returns at least one sample and every
// sample satisfies ok, and returns them; it fails t after timeout with
// the last result.
func (s *Server) WaitFor(t *testing.T, expr string, ok func(Sample) bool, timeout time.Duration) []Sample {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := s.Query(t, expr)
		good := len(got) > 0
		for _, smp := range got {
			good = good && ok(smp)
		}
		if good {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, %s = %v", timeout, expr, got)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Positive is a WaitFor condition: the value is above 0.
func Positive(s Sample) bool { return s.Value > 0 }

// Any is a WaitFor condition: the series exists.
func Any(Sample) bool { return true }
