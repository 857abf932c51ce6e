package wildcard

import "testing"

func TestMatch(t *testing.T) {
	cases := []struct {
		pattern, address string
		want             bool
	}{
		{"a.b.c", "a.b.c", true},
		{"a.b.c", "a.b", false},
		{"a.b", "a.b.c", false},
		{"a.*.c", "a.b.c", true},
		{"a.*.c", "a.c", false},
		{"a.*.c", "a.b.x.c", false},
		{"a.*", "a.b", true},
		{"a.*", "a", false},
		{"a.*", "a.b.c", false},
		{"*", "a", true},
		{"*", "a.b", false},
		{"#", "", true},
		{"#", "a", true},
		{"#", "a.b.c", true},
		{"a.#", "a", true},
		{"a.#", "a.b", true},
		{"a.#", "a.b.c", true},
		{"a.#", "ab", false},
		{"a.#", "b.a", false},
		{"a.#.c", "a.c", true},
		{"a.#.c", "a.b.c", true},
		{"a.#.c", "a.b.b.c", true},
		{"a.#.c", "a.b.b.d", false},
		{"#.c", "c", true},
		{"#.c", "a.b.c", true},
		{"#.c", "a.b.d", false},
		{"a.>", "a.b.c", true},
		{">", "x.y", true},
		{"a.#.*", "a", false},
		{"a.#.*", "a.b", true},
		{"a.*.#", "a.b", true},
		{"a.*.#", "a", false},
		{"sens*", "sensors", false},
		{"sens*", "sens*", true},
		{"#.#", "a", true},
	}
	for _, c := range cases {
		if got := Match(c.pattern, c.address); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.pattern, c.address, got, c.want)
		}
	}
}

func TestIsPatternAndValidate(t *testing.T) {
	for s, want := range map[string]bool{"a.b": false, "a.*": true, "#": true, "a.>": true, "a*": false, "*.x": true} {
		if got := IsPattern(s); got != want {
			t.Errorf("IsPattern(%q) = %v", s, got)
		}
	}
	for _, bad := range []string{"", "a..b", ".a", "a."} {
		if Validate(bad) == nil {
			t.Errorf("Validate(%q) = nil, want error", bad)
		}
	}
	if err := Validate("a.*.#"); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestCompare(t *testing.T) {
	ordered := []string{"#", "a.#", "a.*", "a.b"}
	for i := 1; i < len(ordered); i++ {
		if Compare(ordered[i-1], ordered[i]) >= 0 {
			t.Errorf("Compare(%q, %q) >= 0", ordered[i-1], ordered[i])
		}
	}
}

func BenchmarkMatch(b *testing.B) {
	for b.Loop() {
		Match("sensors.#.temp", "sensors.house.kitchen.temp")
	}
}
