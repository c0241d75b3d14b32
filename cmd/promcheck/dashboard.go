package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// query is one PromQL expression of a dashboard panel, with Grafana's
// variables replaced by the values the check runs it with.
type query struct {
	Panel string // the panel's title, as the failure names it
	RefID string // the target's refId (A, B, …) within the panel
	Expr  string
}

func (q query) String() string { return fmt.Sprintf("panel %q (%s)", q.Panel, q.RefID) }

// The parts of Grafana's dashboard JSON model the check reads.
type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string   `json:"title"`
	Type    string   `json:"type"`
	Targets []target `json:"targets"`
	Panels  []panel  `json:"panels"` // a collapsed row's panels
}

type target struct {
	RefID string `json:"refId"`
	Expr  string `json:"expr"`
}

type variable struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	IncludeAll bool   `json:"includeAll"`
	AllValue   string `json:"allValue"`
	Current    struct {
		Value json.RawMessage `json:"value"` // a string, or a list for multi-value variables
	} `json:"current"`
}

// noQuery are panel types that hold no query.
var noQuery = map[string]bool{"row": true, "text": true, "news": true, "dashlist": true}

// defaultVars are Grafana's built-in variables the dashboard may use, with
// the value the check gives them. $__rate_interval is at least 4 scrape
// intervals in Grafana; 1m covers the 5 s of prometheus.yml with room for a
// Prometheus that has scraped only twice.
var defaultVars = map[string]string{"__rate_interval": "1m", "__interval": "15s", "__range": "1h"}

// parseDashboard returns every query of the dashboard, its variables
// replaced: vars first (built-ins and -var flags), then the dashboard's own
// variables at their saved value, or their "All" value when All is
// selected. A panel that could show data but has no query, and a variable
// that nothing defines, are errors: either would hide a panel from the
// check.
func parseDashboard(data []byte, vars map[string]string) ([]query, error) {
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("dashboard JSON: %w", err)
	}
	values, err := variableValues(d.Templating.List, vars)
	if err != nil {
		return nil, err
	}
	var out []query
	var walk func([]panel) error
	walk = func(ps []panel) error {
		for _, p := range ps {
			if err := walk(p.Panels); err != nil {
				return err
			}
			if noQuery[p.Type] {
				continue
			}
			qs, err := panelQueries(p, values)
			if err != nil {
				return err
			}
			out = append(out, qs...)
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("dashboard has no PromQL query")
	}
	return out, nil
}

func panelQueries(p panel, values map[string]string) ([]query, error) {
	var out []query
	for _, t := range p.Targets {
		if strings.TrimSpace(t.Expr) == "" {
			continue
		}
		expr, err := expand(t.Expr, values)
		if err != nil {
			return nil, fmt.Errorf("panel %q (%s): %w", p.Title, t.RefID, err)
		}
		out = append(out, query{Panel: p.Title, RefID: t.RefID, Expr: expr})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("panel %q (type %s) has no PromQL query", p.Title, p.Type)
	}
	return out, nil
}

// variableValues merges the dashboard's variables under vars (which win).
func variableValues(list []variable, vars map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(list)+len(vars))
	for _, v := range list {
		if v.Type == "datasource" {
			continue // chooses where queries go, never appears in one
		}
		val, err := v.value()
		if err != nil {
			return nil, fmt.Errorf("variable %q: %w", v.Name, err)
		}
		out[v.Name] = val
	}
	for k, v := range vars {
		out[k] = v
	}
	return out, nil
}

// value is what Grafana puts in a query for the variable's saved
// selection. Without an allValue, Grafana expands All to the values it
// found, which the check cannot know, so All needs an explicit allValue.
func (v variable) value() (string, error) {
	var vals []string
	var one string
	switch {
	case len(v.Current.Value) == 0:
	case json.Unmarshal(v.Current.Value, &one) == nil:
		vals = []string{one}
	case json.Unmarshal(v.Current.Value, &vals) == nil:
	default:
		return "", fmt.Errorf("current value %s is neither a string nor a list", v.Current.Value)
	}
	if len(vals) == 1 && vals[0] == "$__all" {
		if !v.IncludeAll || v.AllValue == "" {
			return "", fmt.Errorf(`"All" is selected but the variable has no allValue`)
		}
		return v.AllValue, nil
	}
	switch len(vals) {
	case 0:
		return "", fmt.Errorf("no current value")
	case 1:
		return vals[0], nil
	}
	return "(" + strings.Join(vals, "|") + ")", nil
}

// varRef matches $name, ${name} and ${name:format}.
var varRef = regexp.MustCompile(`\$\{(\w+)(:[^}]*)?\}|\$(\w+)`)

// expand replaces every variable of expr; an unknown one is an error, not
// left in place for Prometheus to reject with a less helpful message.
func expand(expr string, values map[string]string) (string, error) {
	var missing []string
	out := varRef.ReplaceAllStringFunc(expr, func(ref string) string {
		m := varRef.FindStringSubmatch(ref)
		name := m[1] + m[3]
		if m[2] != "" {
			missing = append(missing, ref+" (formats are not supported)")
			return ref
		}
		v, ok := values[name]
		if !ok {
			missing = append(missing, ref)
			return ref
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("undefined variable %s", strings.Join(missing, ", "))
	}
	return out, nil
}
