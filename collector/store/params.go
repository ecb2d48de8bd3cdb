package store

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Params are the values of a query's {name:Type} parameters, as text.
type Params map[string]string

// Query runs sql, whose parameters are written {name:Type} (ClickHouse's
// syntax, as clickhouse-client --param_name takes them). Current releases
// get them as query parameters: the server parses each value by its
// declared type, so no value can change the query. ClickHouse 18.16 has no
// query parameters; there Bind puts checked literals in their place.
func (s *Store) Query(ctx context.Context, sql string, p Params) (driver.Rows, error) {
	ctx, sql, err := s.prepare(ctx, sql, p)
	if err != nil {
		return nil, err
	}
	return s.conn.Query(ctx, sql)
}

// Exec is Query for statements that return no rows.
func (s *Store) Exec(ctx context.Context, sql string, p Params) error {
	ctx, sql, err := s.prepare(ctx, sql, p)
	if err != nil {
		return err
	}
	return s.conn.Exec(ctx, sql)
}

// QueryRow runs sql (as Query) and scans its one row into dest.
func (s *Store) QueryRow(ctx context.Context, sql string, p Params, dest ...any) error {
	ctx, sql, err := s.prepare(ctx, sql, p)
	if err != nil {
		return err
	}
	return s.conn.QueryRow(ctx, sql).Scan(dest...)
}

func (s *Store) prepare(ctx context.Context, sql string, p Params) (context.Context, string, error) {
	// On a cluster the canned queries' subqueries are GLOBAL IN in the SQL
	// itself (a setting would not do: 18.16's protocol takes numeric
	// settings only).
	var opts []clickhouse.QueryOption
	if !s.serverParams {
		bound, err := Bind(sql, p)
		if err != nil {
			return ctx, "", err
		}
		return clickhouse.Context(ctx, opts...), bound, nil
	}
	// The same checks as Bind (every placeholder has a value of its
	// type), so both ways refuse alike; the server parses the values.
	if _, err := Bind(sql, p); err != nil {
		return ctx, "", err
	}
	if len(p) > 0 {
		escaped := make(clickhouse.Parameters, len(p))
		for k, v := range p {
			escaped[k] = escapeParam(v)
		}
		opts = append(opts, clickhouse.WithParameters(escaped))
	}
	return clickhouse.Context(ctx, opts...), sql, nil
}

// escapeParam writes a value the way the server reads a query parameter:
// in ClickHouse's escaped text format (a tab or newline would end it, a
// backslash starts an escape), inside the quoting clickhouse-go adds.
func escapeParam(v string) string {
	if !strings.ContainsAny(v, "\\\t\n\r\x00") {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\':
			b.WriteString(`\\`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case 0:
			b.WriteString(`\0`)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

var placeholder = regexp.MustCompile(`\{([a-z_]+):([A-Za-z0-9]+)\}`)

func supportedType(typ string) bool {
	switch typ {
	case "String", "Float64", "Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64":
		return true
	}
	return false
}

// Bind replaces every {name:Type} in sql with values[name] as a literal of
// Type, for ClickHouse 18.16, which has no query parameters. Only String,
// integer types and Float64 are allowed; integers must parse, and strings
// are quoted with every backslash and quote escaped, so no value can end
// the literal.
func Bind(sql string, values map[string]string) (string, error) {
	var bindErr error
	out := placeholder.ReplaceAllStringFunc(sql, func(m string) string {
		sub := placeholder.FindStringSubmatch(m)
		name, typ := sub[1], sub[2]
		v, ok := values[name]
		if !ok {
			bindErr = fmt.Errorf("query parameter %q has no value", name)
			return m
		}
		switch {
		case !supportedType(typ):
			bindErr = fmt.Errorf("query parameter %q: type %s is not supported", name, typ)
			return m
		case typ == "String":
			return quote(v)
		case typ == "Float64":
			if _, err := strconv.ParseFloat(v, 64); err != nil {
				bindErr = fmt.Errorf("query parameter %q: %q is not a Float64", name, v)
				return m
			}
			return v
		default:
			bits, _ := strconv.Atoi(strings.TrimPrefix(strings.TrimPrefix(typ, "U"), "Int"))
			var err error
			if strings.HasPrefix(typ, "U") {
				_, err = strconv.ParseUint(v, 10, bits)
			} else {
				_, err = strconv.ParseInt(v, 10, bits)
			}
			if err != nil {
				bindErr = fmt.Errorf("query parameter %q: %q is not a %s", name, v, typ)
				return m
			}
			return v
		}
	})
	return out, bindErr
}

func quote(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\', '\'':
			b.WriteByte('\\')
			b.WriteByte(c)
		case 0:
			b.WriteString(`\0`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}
