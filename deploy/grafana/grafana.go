// Package grafana reads the mcpwarden Grafana dashboard
// (dashboards/mcpwarden.json) and its provisioning (provisioning/), for the
// tests that run its queries against the real services: the Prometheus
// expressions against a Prometheus scraping the daemon's and collector's
// series (metrics), the ClickHouse SQL against the migrated schema
// (collector), the model itself in deploy.
package grafana

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Data source uids the dashboard refers to (provisioning/datasources).
const (
	PrometheusUID = "mcpwarden-prometheus"
	ClickHouseUID = "mcpwarden-clickhouse"
)

// Dashboard is the subset of Grafana's dashboard model the file uses;
// Load refuses any other field, so a typo cannot pass for a setting.
type Dashboard struct {
	UID           string                    `json:"uid"`
	Title         string                    `json:"title"`
	Description   string                    `json:"description"`
	Tags          []string                  `json:"tags"`
	Timezone      string                    `json:"timezone"`
	Editable      bool                      `json:"editable"`
	GraphTooltip  int                       `json:"graphTooltip"`
	SchemaVersion int                       `json:"schemaVersion"`
	Version       int                       `json:"version"`
	Refresh       string                    `json:"refresh"`
	Time          struct{ From, To string } `json:"time"`
	Timepicker    struct{}                  `json:"timepicker"`
	Templating    struct{ List []struct{} } `json:"templating"`
	Annotations   struct{ List []struct{} } `json:"annotations"`
	Links         []struct{}                `json:"links"`
	Panels        []Panel                   `json:"panels"`
}

// Panel is one panel or row.
type Panel struct {
	ID          int             `json:"id"`
	Type        string          `json:"type"`
	Title       string          `json:"title"`
	Description string          `json:"description,omitempty"`
	Collapsed   bool            `json:"collapsed,omitempty"`
	Datasource  *Datasource     `json:"datasource,omitempty"`
	GridPos     GridPos         `json:"gridPos"`
	Targets     []Target        `json:"targets,omitempty"`
	FieldConfig json.RawMessage `json:"fieldConfig,omitempty"`
	Options     json.RawMessage `json:"options,omitempty"`
	Panels      []Panel         `json:"panels,omitempty"`
}

// GridPos places a panel on the 24-column grid.
type GridPos struct{ X, Y, W, H int }

// Datasource names a provisioned data source.
type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Target is one query: PromQL (Expr) or ClickHouse SQL (RawSQL).
type Target struct {
	Datasource   Datasource `json:"datasource"`
	RefID        string     `json:"refId"`
	Expr         string     `json:"expr,omitempty"`
	LegendFormat string     `json:"legendFormat,omitempty"`
	Range        bool       `json:"range,omitempty"`
	Instant      bool       `json:"instant,omitempty"`
	EditorType   string     `json:"editorType,omitempty"`
	QueryType    string     `json:"queryType,omitempty"`
	Format       *int       `json:"format,omitempty"`
	RawSQL       string     `json:"rawSql,omitempty"`
}

// Query is one target with the title of its panel.
type Query struct {
	Panel string
	Target
}

// Load reads dir/dashboards/mcpwarden.json strictly.
func Load(dir string) (*Dashboard, error) {
	b, err := os.ReadFile(filepath.Join(dir, "dashboards", "mcpwarden.json"))
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var d Dashboard
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("dashboards/mcpwarden.json: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("dashboards/mcpwarden.json: data after the dashboard")
	}
	return &d, nil
}

// Queries returns every target of the dashboard whose data source has uid.
func (d *Dashboard) Queries(uid string) []Query {
	var out []Query
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				if t.Datasource.UID == uid {
					out = append(out, Query{Panel: p.Title, Target: t})
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// PromQL is expr as Prometheus receives it from Grafana for a range of
// interval: the $__rate_interval and $__interval variables replaced.
func PromQL(expr, interval string) string {
	return strings.NewReplacer("$__rate_interval", interval, "$__interval", interval).Replace(expr)
}

// ClickHouseSQL is sql as the ClickHouse data source sends it for the
// range [from, to) in Unix seconds with a bucket of intervalS seconds:
// its macros expanded.
func ClickHouseSQL(sql string, from, to, intervalS int64) string {
	return strings.NewReplacer(
		"$__fromTime", fmt.Sprintf("toDateTime(%d)", from),
		"$__toTime", fmt.Sprintf("toDateTime(%d)", to),
		"$__interval_s", fmt.Sprint(intervalS),
	).Replace(sql)
}
