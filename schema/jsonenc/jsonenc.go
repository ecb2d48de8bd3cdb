// Package jsonenc holds what the hand-written JSON encoders share (the
// audit log's records, the scope's canonical form): strings written byte
// for byte as encoding/json writes them.
package jsonenc

import "unicode/utf8"

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string the way encoding/json does with
// HTML escaping on: `"` and `\` escaped with a backslash; \b \f \n \r \t by
// name; other control characters and < > & as \u00XX; U+2028 and U+2029 as
// \u2028 and \u2029; each byte of invalid UTF-8 as \ufffd; everything else
// as it is.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	plain := 0 // s[plain:i] is still to be copied as it is
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			var esc string
			switch {
			case c == '"':
				esc = `\"`
			case c == '\\':
				esc = `\\`
			case c == '\b':
				esc = `\b`
			case c == '\f':
				esc = `\f`
			case c == '\n':
				esc = `\n`
			case c == '\r':
				esc = `\r`
			case c == '\t':
				esc = `\t`
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				b = append(b, s[plain:i]...)
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
				i++
				plain = i
				continue
			default:
				i++
				continue
			}
			b = append(b, s[plain:i]...)
			b = append(b, esc...)
			i++
			plain = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[plain:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[plain:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		plain = i
	}
	b = append(b, s[plain:]...)
	return append(b, '"')
}
