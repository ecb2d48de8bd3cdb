// Command mcpecho is the trivial MCP server of the proxy benchmarks: it
// answers initialize, tools/list, tools/call and ping at once with fixed
// results, so a round trip through it measures what sits in between. It
// finds a request's id and method by their position in the envelope, as
// every JSON-RPC writer in these benchmarks puts them first; it is not a
// JSON parser and must not be used as a real server.
package main

import (
	"bufio"
	"bytes"
	"os"
)

var (
	keyID     = []byte(`"id":`)
	keyMethod = []byte(`"method":"`)
	results   = map[string][]byte{
		"initialize": []byte(`{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"mcpecho","version":"1"}}`),
		"tools/list": []byte(`{"tools":[{"name":"echo","description":"answers at once","inputSchema":{"type":"object"}}]}`),
		"tools/call": []byte(`{"content":[{"type":"text","text":"ok"}]}`),
		"ping":       []byte(`{}`),
	}
)

func main() {
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	for {
		line, err := in.ReadSlice('\n')
		if err != nil {
			return
		}
		id, method := field(line, keyID, ",}"), field(line, keyMethod, `"`)
		if id == nil || method == nil {
			continue // a notification or a response: nothing to answer
		}
		out.WriteString(`{"jsonrpc":"2.0","id":`)
		out.Write(id)
		if res, ok := results[string(method)]; ok {
			out.WriteString(`,"result":`)
			out.Write(res)
		} else {
			out.WriteString(`,"error":{"code":-32601,"message":"Method not found"}`)
		}
		out.WriteString("}\n")
		if in.Buffered() == 0 {
			out.Flush()
		}
	}
}

// field returns the bytes after the first key up to one of the stop bytes.
func field(line, key []byte, stop string) []byte {
	i := bytes.Index(line, key)
	if i < 0 {
		return nil
	}
	rest := line[i+len(key):]
	j := bytes.IndexAny(rest, stop)
	if j < 0 {
		return nil
	}
	return rest[:j]
}
