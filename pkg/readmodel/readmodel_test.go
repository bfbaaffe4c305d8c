package readmodel

import (
	"reflect"
	"testing"
)

func TestFresh(t *testing.T) {
	ups := []Update[string]{
		{ID: "a", Row: "a1", Keep: true},
		{ID: "b", Row: "b1", Keep: true}, // seen before: not fresh
		{ID: "c", Keep: false},           // fresh, nothing to keep
		{ID: "a", Row: "a2", Keep: true}, // the same id twice: the first counts
	}
	tests := []struct {
		name      string
		give      map[string]bool
		wantRows  []string
		wantFresh bool
	}{
		{name: "some fresh", give: map[string]bool{"a": true, "c": true}, wantRows: []string{"a1"}, wantFresh: true},
		{name: "fresh but nothing kept", give: map[string]bool{"c": true}, wantRows: nil, wantFresh: true},
		{name: "none fresh", give: map[string]bool{}, wantRows: nil, wantFresh: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows, fresh := Fresh(ups, tt.give)
			if !reflect.DeepEqual(rows, tt.wantRows) || fresh != tt.wantFresh {
				t.Fatalf("Fresh = %v, %v; want %v, %v", rows, fresh, tt.wantRows, tt.wantFresh)
			}
		})
	}
	if got, want := IDs(ups), []string{"a", "b", "c", "a"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("IDs = %v, want %v", got, want)
	}
}
