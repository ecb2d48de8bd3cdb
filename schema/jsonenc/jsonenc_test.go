package jsonenc

import (
	"bytes"
	"encoding/json"
	"testing"
)

func checkString(t *testing.T, s string) {
	t.Helper()
	want, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := AppendString([]byte("x"), s); !bytes.Equal(got[1:], want) || got[0] != 'x' {
		t.Fatalf("AppendString(%q) = %s, encoding/json writes %s", s, got[1:], want)
	}
}

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{
		"", "plain", `"`, `\`, "\b\f\n\r\t", "\x00\x01\x1f\x7f", "<>&", "a<b>c&d",
		"\u2028\u2029", "é☃𝄞", "\xff", "\xc3\x28", "\xed\xa0\x80", "\xf4\x90\x80\x80", "tail\xe2\x82",
	} {
		checkString(t, s)
	}
}

func FuzzAppendString(f *testing.F) {
	f.Add("a<\u2028\xff\"\\\n")
	f.Fuzz(checkString)
}
