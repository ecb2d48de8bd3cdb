package proxy

import (
	"encoding/json"

	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/policy"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/schema/strictjson"
)

// Prompts and completions reach the server only for the prompts the
// scope's prompt_allowlist names (absent: none), and every argument value
// that looks like a path is checked like a tool's (a prompt can read a
// file just as a tool can).

// filterPrompts keeps the allowlisted prompts of a prompts/list result.
func (s *session) filterPrompts(_ *request, result json.RawMessage) json.RawMessage {
	return filterNamed(result, "prompts", s.pol.PromptAllowed)
}

// decidePrompt checks prompts/get: an allowlisted name; the gate checks
// the arguments.
func (s *session) decidePrompt(rq *request) (admission, *policy.Denial) {
	name, ok := jsonrpc.String(rq.param("name"))
	if !ok || name == "" {
		return admission{}, &policy.Denial{Code: schema.ErrMalformedRequest, Reason: "prompts/get needs a prompt name (a string)"}
	}
	rq.dec.Tool = recordLabel(truncate(name, 128))
	if !s.pol.PromptAllowed(name) {
		rq.dec.ActionClass = policy.ClassNone
		return admission{}, &policy.Denial{Code: schema.ErrPromptNotAllowed, Reason: "prompt is not in this run's prompt_allowlist"}
	}
	args := rq.param("arguments")
	if args != nil && firstByte(args) != '{' && string(args) != "null" {
		return admission{}, &policy.Denial{Code: schema.ErrMalformedRequest, Reason: "prompts/get arguments must be an object"}
	}
	return admission{check: func(eff *scopeView) ([]string, *policy.Denial) {
		return s.pol.CheckLooseArguments(args, eff.paths)
	}}, nil
}

// completionParams is what completion/complete carries (exact-case names,
// other members ignored).
type completionParams struct {
	Ref *struct {
		Type string `json:"type"`
		Name string `json:"name"`
		URI  string `json:"uri"`
	} `json:"ref"`
	Argument *struct {
		Name  string          `json:"name"`
		Value json.RawMessage `json:"value"`
	} `json:"argument"`
	Context *struct {
		Arguments json.RawMessage `json:"arguments"`
	} `json:"context"`
}

// decideCompletion checks completion/complete: a prompt reference must name
// an allowlisted prompt, a resource reference a URI the run may read; the
// gate checks the value being completed and the context's arguments (the
// server's suggestions for a path would list names outside the scope).
func (s *session) decideCompletion(rq *request) (admission, *policy.Denial) {
	var p completionParams
	if err := strictjson.Unmarshal(rq.raw.Params, &p, strictjson.AllowUnknownMembers()); err != nil || p.Ref == nil || p.Argument == nil {
		return admission{}, &policy.Denial{Code: schema.ErrMalformedRequest, Reason: "completion/complete needs ref and argument objects"}
	}
	var uri string
	switch p.Ref.Type {
	case "ref/prompt":
		rq.dec.Tool = recordLabel(truncate(p.Ref.Name, 128))
		if !s.pol.PromptAllowed(p.Ref.Name) {
			rq.dec.ActionClass = policy.ClassNone
			return admission{}, &policy.Denial{Code: schema.ErrPromptNotAllowed, Reason: "prompt is not in this run's prompt_allowlist"}
		}
	case "ref/resource":
		uri = p.Ref.URI
		if uri == "" {
			return admission{}, &policy.Denial{Code: schema.ErrMalformedRequest, Reason: "a ref/resource needs a uri"}
		}
	default:
		return admission{}, &policy.Denial{Code: schema.ErrMalformedRequest, Reason: "ref.type must be ref/prompt or ref/resource"}
	}
	value := p.Argument.Value
	var ctxArgs json.RawMessage
	if p.Context != nil {
		ctxArgs = p.Context.Arguments
	}
	return admission{check: func(eff *scopeView) ([]string, *policy.Denial) {
		var checked []string
		if uri != "" {
			real, d := s.pol.CheckURI(uri, eff.paths)
			if real != "" {
				checked = append(checked, real)
			}
			if d != nil {
				return checked, d
			}
		}
		for _, raw := range []json.RawMessage{value, ctxArgs} {
			paths, d := s.pol.CheckLooseArguments(raw, eff.paths)
			checked = append(checked, paths...)
			if d != nil {
				return checked, d
			}
		}
		return checked, nil
	}}, nil
}
