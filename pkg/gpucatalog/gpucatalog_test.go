package gpucatalog

import "testing"

func TestSeedIsValidAndUnambiguous(t *testing.T) {
	seed := Seed()
	for _, m := range seed {
		if vs := Check(m); len(vs) > 0 {
			t.Errorf("seed %s: %v", m.ID, vs)
		}
	}
	ix, err := NewIndex(seed)
	if err != nil {
		t.Fatal(err)
	}
	// The models of the catalogue, by id and by alias, any case.
	for _, tt := range []struct{ give, want string }{
		{"T4", "T4"}, {"h20", "H20"}, {"H800", "H800"}, {"A800", "A800"}, {"L20", "L20"},
		{"RTX4090D", "RTX_4090D"}, {"rtx 4090d", "RTX_4090D"}, {"RTX_4090D", "RTX_4090D"},
		{"H100", "H100"}, {"A100", "A100"}, {"L40S", "L40S"}, {"RTX_4090", "RTX_4090"}, {" RTX4090 ", "RTX_4090"},
	} {
		if got, ok := ix.Resolve(tt.give); !ok || got != tt.want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", tt.give, got, ok, tt.want)
		}
	}
	if got, ok := ix.Resolve("GTX_9999"); ok {
		t.Errorf("Resolve(GTX_9999) = %q, want unknown", got)
	}
}

func TestIndexRefusesANameTwoModelsClaim(t *testing.T) {
	_, err := NewIndex([]Model{{ID: "A", Aliases: []string{"X"}}, {ID: "B", Aliases: []string{"x"}}})
	if err == nil {
		t.Fatal("two models claiming alias x were indexed")
	}
	ix, err := NewIndex(Seed())
	if err != nil {
		t.Fatal(err)
	}
	vs := ix.Conflicts(Model{ID: "RTX_4090_NEW", Aliases: []string{"fresh", "rtx4090"}})
	if len(vs) != 1 || vs[0].Field != "aliases[1]" {
		t.Fatalf("conflicts = %v, want aliases[1] (rtx4090 names RTX_4090)", vs)
	}
}

func TestCheck(t *testing.T) {
	for _, tt := range []struct {
		give Model
		want string // the first violation's field; "" = valid
	}{
		{Model{"Z9", "nvidia", 8, "Z9", []string{"z-9"}}, ""},
		{Model{"z9", "nvidia", 8, "Z9", nil}, "gpu_model"},
		{Model{"Z.9", "nvidia", 8, "Z9", nil}, "gpu_model"},
		{Model{"Z9", "acme", 8, "Z9", nil}, "vendor"},
		{Model{"Z9", "nvidia", 0, "Z9", nil}, "memory_gb"},
		{Model{"Z9", "nvidia", 8, "", nil}, "display_name"},
		{Model{"Z9", "nvidia", 8, "Z9", []string{"z9"}}, "aliases[0]"},
		{Model{"Z9", "nvidia", 8, "Z9", []string{"a>b"}}, "aliases[0]"},
	} {
		vs := Check(tt.give)
		got := ""
		if len(vs) > 0 {
			got = vs[0].Field
		}
		if got != tt.want {
			t.Errorf("Check(%+v) first violation %q (%v), want %q", tt.give, got, vs, tt.want)
		}
	}
}
