package schema

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestScopeJSONSchemaInStep keeps scope.schema.json and the Scope type in step:
// the same property names, the same required set, compatible JSON types.
func TestScopeJSONSchemaInStep(t *testing.T) {
	raw, err := os.ReadFile("scope.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Required             []string                   `json:"required"`
		AdditionalProperties bool                       `json:"additionalProperties"`
		Properties           map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("scope.schema.json: %v", err)
	}
	if doc.AdditionalProperties {
		t.Error("schema must refuse additional properties, as the parser does")
	}
	var goFields, goRequired []string
	typ := reflect.TypeOf(Scope{})
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		goFields = append(goFields, name)
		if !strings.Contains(opts, "omitempty") && name != "resource_refs" {
			goRequired = append(goRequired, name)
		}
		prop, ok := doc.Properties[name]
		if !ok {
			t.Errorf("Go field %s (%q) missing from scope.schema.json", f.Name, name)
			continue
		}
		var p struct {
			Type any   `json:"type"`
			Enum []any `json:"enum"`
		}
		if err := json.Unmarshal(prop, &p); err != nil {
			t.Fatal(err)
		}
		if want := jsonTypeOf(f.Type); want != "" && p.Enum == nil && !typeListed(p.Type, want) {
			t.Errorf("%s: schema type %v, Go type %s wants %q", name, p.Type, f.Type, want)
		}
	}
	for name := range doc.Properties {
		if !slices.Contains(goFields, name) {
			t.Errorf("schema property %q has no Go field", name)
		}
	}
	slices.Sort(goRequired)
	req := slices.Clone(doc.Required)
	slices.Sort(req)
	if !slices.Equal(goRequired, req) {
		t.Errorf("required: schema %v, Go %v", req, goRequired)
	}
}

func jsonTypeOf(t reflect.Type) string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.String() == "time.Time" {
		return "string"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Int:
		return "integer"
	case reflect.Bool:
		return "boolean"
	case reflect.Slice:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	}
	return ""
}

func typeListed(schemaType any, want string) bool {
	switch v := schemaType.(type) {
	case string:
		return v == want
	case []any:
		for _, x := range v {
			if x == want {
				return true
			}
		}
	}
	return false
}
