package canon

import (
	"mime"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// normaliseMediaType parses a Content-Type value and returns its normal
// form: type and subtype in lower case, parameter names in lower case and
// sorted. For the JSON modes the type must be application/json or
// application/*+json, the charset must be absent, utf-8 or one of the UTF-16
// labels, and the charset parameter is dropped from the normal form because
// the canonical payload is always UTF-8; decode reports which UTF-16 form
// (if any) the body must be decoded from first. In raw mode any well-formed
// media type is accepted and kept, charset included (value lower-cased),
// since the bytes are hashed as they are.
func normaliseMediaType(contentType string, m Mode) (mt string, decode string, err error) {
	if strings.TrimSpace(contentType) == "" {
		if m == ModeRaw {
			return "", "", nil
		}
		return "", "", mediaErr("missing Content-Type")
	}
	t, params, perr := mime.ParseMediaType(contentType)
	if perr != nil {
		return "", "", mediaErr("malformed Content-Type")
	}
	cs, hasCS := params["charset"]
	cs = strings.ToLower(cs)
	if m == ModeRaw {
		if hasCS {
			params["charset"] = cs
		}
		return mime.FormatMediaType(t, params), "", nil
	}
	if t != "application/json" && !(strings.HasPrefix(t, "application/") && strings.HasSuffix(t, "+json")) {
		return "", "", mediaErr("media type is not JSON")
	}
	switch cs {
	case "", "utf-8":
	case "utf-16", "utf-16le", "utf-16be":
		decode = cs
	default:
		return "", "", mediaErr("charset is not utf-8 or utf-16")
	}
	delete(params, "charset")
	return mime.FormatMediaType(t, params), decode, nil
}

func mediaErr(reason string) *Error {
	return &Error{Code: CodeUnsupportedMediaType, Offset: -1, Reason: reason}
}

// decodeUTF16 turns a UTF-16 body into UTF-8. A byte order mark selects
// the byte order and is dropped; without one, utf-16le and utf-16be say
// which, and plain utf-16 means big-endian (RFC 2781 section 4.3).
// Unpaired surrogates and odd lengths are refused as INVALID_JSON.
func decodeUTF16(b []byte, label string) ([]byte, error) {
	big := label != "utf-16le"
	switch {
	case len(b) >= 2 && b[0] == 0xFE && b[1] == 0xFF && label != "utf-16le":
		big, b = true, b[2:]
	case len(b) >= 2 && b[0] == 0xFF && b[1] == 0xFE && label != "utf-16be":
		big, b = false, b[2:]
	}
	if len(b)%2 != 0 {
		return nil, syntaxErr(len(b), "UTF-16 body with an odd number of bytes")
	}
	out := make([]byte, 0, len(b)/2+len(b)/8)
	for i := 0; i < len(b); i += 2 {
		u := rune(b[i])<<8 | rune(b[i+1])
		if !big {
			u = rune(b[i+1])<<8 | rune(b[i])
		}
		if utf16.IsSurrogate(u) {
			if u >= 0xDC00 || i+3 >= len(b) {
				return nil, syntaxErr(i, "unpaired UTF-16 surrogate")
			}
			l := rune(b[i+2])<<8 | rune(b[i+3])
			if !big {
				l = rune(b[i+3])<<8 | rune(b[i+2])
			}
			if l < 0xDC00 || l > 0xDFFF {
				return nil, syntaxErr(i, "unpaired UTF-16 surrogate")
			}
			u = utf16.DecodeRune(u, l)
			i += 2
		}
		out = utf8.AppendRune(out, u)
	}
	return out, nil
}
