package domain

import (
	"encoding/json"
	"slices"

	"github.com/gpubill/gpubill/pkg/jsonplain"
)

// AppendJSONStrings appends m as encoding/json writes a map[string]string
// (keys sorted, byte for byte the same), without its reflection; it falls
// back to encoding/json when a key or value needs escaping.
func AppendJSONStrings(b []byte, m map[string]string) ([]byte, error) {
	if m == nil {
		return append(b, "null"...), nil
	}
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if !jsonplain.Plain(k) || !jsonplain.Plain(v) {
			j, err := json.Marshal(m)
			return append(b, j...), err
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, `":"`...)
		b = append(b, m[k]...)
		b = append(b, '"')
	}
	return append(b, '}'), nil
}
