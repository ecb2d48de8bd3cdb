package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/mcpwarden/mcpwarden/deploy/grafana"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// provisioned is what provisioning/ declares, decoded strictly.
type provisioned struct {
	APIVersion  int `json:"apiVersion"`
	Datasources []struct {
		Name           string            `json:"name"`
		UID            string            `json:"uid"`
		Type           string            `json:"type"`
		Access         string            `json:"access"`
		URL            string            `json:"url"`
		IsDefault      bool              `json:"isDefault"`
		Editable       bool              `json:"editable"`
		JSONData       map[string]any    `json:"jsonData"`
		SecureJSONData map[string]string `json:"secureJsonData"`
	} `json:"datasources"`
}

type providers struct {
	APIVersion int `json:"apiVersion"`
	Providers  []struct {
		Name            string `json:"name"`
		Folder          string `json:"folder"`
		Type            string `json:"type"`
		DisableDeletion bool   `json:"disableDeletion"`
		AllowUIUpdates  bool   `json:"allowUiUpdates"`
		Options         struct {
			Path string `json:"path"`
		} `json:"options"`
	} `json:"providers"`
}

func readStrict(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestGrafanaDashboard checks the dashboard's model and its provisioning
// by the compose file: the JSON decodes strictly into the fields Grafana's
// model has (grafana.Load), panels have unique ids and fit the 24-column
// grid without overlapping, it has the four sections the issue names,
// every query names a data source the provisioning declares (by uid and
// type), the compose file mounts the provisioning and the dashboards where
// the provider looks, and Prometheus' own checker (promtool, Debian's
// prometheus package) accepts the scrape configuration and every PromQL
// expression. The queries run against the real series and schema in
// metrics.TestDashboardQueries and collector.TestDashboardSQL.
func TestGrafanaDashboard(t *testing.T) {
	root := testenv.RepoRoot()
	dir := filepath.Join(root, "deploy", "grafana")
	d, err := grafana.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 {
		t.Errorf("uid %q, title %q, schemaVersion %d", d.UID, d.Title, d.SchemaVersion)
	}

	var ds provisioned
	readStrict(t, filepath.Join(dir, "provisioning", "datasources", "mcpwarden.yml"), &ds)
	types := map[string]string{}
	for _, s := range ds.Datasources {
		types[s.UID] = s.Type
		for k, v := range s.SecureJSONData {
			if !strings.HasPrefix(v, "$") {
				t.Errorf("data source %s: secureJsonData.%s is a value in clear, want an environment variable", s.UID, k)
			}
		}
	}
	if types[grafana.PrometheusUID] != "prometheus" || types[grafana.ClickHouseUID] != "grafana-clickhouse-datasource" {
		t.Fatalf("provisioned data sources %v, want %s (prometheus) and %s (grafana-clickhouse-datasource)", types, grafana.PrometheusUID, grafana.ClickHouseUID)
	}

	ids := map[int]string{}
	type cell struct{ x, y int }
	used := map[cell]string{}
	var sections []string
	for _, p := range d.Panels {
		if prev, ok := ids[p.ID]; ok {
			t.Errorf("panel id %d is %q and %q", p.ID, prev, p.Title)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v is off the 24-column grid", p.Title, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := used[cell{x, y}]; ok {
					t.Fatalf("panels %q and %q overlap at %d,%d", other, p.Title, x, y)
				}
				used[cell{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			sections = append(sections, p.Title)
			continue
		}
		if !slices.Contains([]string{"timeseries", "stat", "table"}, p.Type) {
			t.Errorf("panel %q: type %q", p.Title, p.Type)
		}
		if p.Description == "" || len(p.Targets) == 0 || p.Datasource == nil {
			t.Errorf("panel %q has no description, target or data source", p.Title)
			continue
		}
		refs := map[string]bool{}
		for _, q := range p.Targets {
			if refs[q.RefID] {
				t.Errorf("panel %q: refId %s twice", p.Title, q.RefID)
			}
			refs[q.RefID] = true
			if q.Datasource != *p.Datasource {
				t.Errorf("panel %q: a target's data source %v is not the panel's %v", p.Title, q.Datasource, *p.Datasource)
			}
			if types[q.Datasource.UID] != q.Datasource.Type {
				t.Errorf("panel %q: data source %v is not provisioned", p.Title, q.Datasource)
			}
			switch q.Datasource.UID {
			case grafana.PrometheusUID:
				if q.Expr == "" || q.RawSQL != "" {
					t.Errorf("panel %q: a Prometheus target needs expr only", p.Title)
				}
			case grafana.ClickHouseUID:
				if q.RawSQL == "" || q.Expr != "" || q.EditorType != "sql" || q.Format == nil {
					t.Errorf("panel %q: a ClickHouse target needs rawSql, editorType sql and a format", p.Title)
				}
				if wantTS := p.Type == "timeseries"; wantTS != (q.QueryType == "timeseries") {
					t.Errorf("panel %q (%s): queryType %q", p.Title, p.Type, q.QueryType)
				}
			}
		}
	}
	if want := []string{"Runs", "Findings", "Denials", "Health"}; !slices.Equal(sections, want) {
		t.Errorf("sections %v, want %v", sections, want)
	}

	// The compose file provisions it.
	var pv providers
	readStrict(t, filepath.Join(dir, "provisioning", "dashboards", "mcpwarden.yml"), &pv)
	if len(pv.Providers) != 1 || pv.Providers[0].Type != "file" {
		t.Fatalf("dashboard providers %+v", pv.Providers)
	}
	var compose struct {
		Services map[string]struct {
			Volumes     []string          `json:"volumes"`
			Environment map[string]string `json:"environment"`
			Command     []string          `json:"command"`
		} `json:"services"`
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatal(err)
	}
	g := compose.Services["grafana"]
	for _, v := range []string{
		"./grafana/provisioning/datasources:/etc/grafana/provisioning/datasources:ro",
		"./grafana/provisioning/dashboards:/etc/grafana/provisioning/dashboards:ro",
		"./grafana/dashboards:" + pv.Providers[0].Options.Path + ":ro",
	} {
		if !slices.Contains(g.Volumes, v) {
			t.Errorf("the compose file's grafana service does not mount %s: %v", v, g.Volumes)
		}
	}
	if !strings.Contains(g.Environment["GF_INSTALL_PLUGINS"], "grafana-clickhouse-datasource") {
		t.Errorf("grafana does not install the ClickHouse data source: %v", g.Environment)
	}
	if g.Environment["CLICKHOUSE_ANALYST_PASSWORD"] == "" {
		t.Errorf("grafana gets no CLICKHOUSE_ANALYST_PASSWORD for the data source")
	}
	if !slices.Contains(compose.Services["prometheus"].Volumes, "./prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro") {
		t.Errorf("the compose file's prometheus does not mount prometheus/prometheus.yml")
	}
	if c := compose.Services["collector-1"].Command; !slices.Contains(c, "--metrics-listen") {
		t.Errorf("the collectors serve no metrics for prometheus: %v", c)
	}

	// Prometheus' checker: the scrape configuration, and every expression
	// as a recording rule (promtool parses it with Prometheus' parser).
	promtool := testenv.RequireCommand(t, "promtool")
	if out, err := exec.Command(promtool, "check", "config", filepath.Join(root, "deploy", "prometheus", "prometheus.yml")).CombinedOutput(); err != nil {
		t.Errorf("promtool check config: %v\n%s", err, out)
	}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	qs := d.Queries(grafana.PrometheusUID)
	for i, q := range qs {
		fmt.Fprintf(&rules, "      - record: dashboard:expr%d\n        expr: %q\n", i, grafana.PromQL(q.Expr, "1m"))
	}
	rf := filepath.Join(t.TempDir(), "rules.yml")
	if err := os.WriteFile(rf, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", rf).CombinedOutput(); err != nil || !strings.Contains(string(out), fmt.Sprintf("%d rules found", len(qs))) {
		t.Errorf("promtool check rules on the dashboard's %d expressions: %v\n%s", len(qs), err, out)
	}
}
