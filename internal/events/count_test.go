package events

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeCountedChecksTheBounds(t *testing.T) {
	good := `{"v":1,"from":"executor@a#00","adds":[{"k":"s.abc-_9","n":1,"until":1800000000000},{"k":"l.x.5","n":-300,"until":1800000000000}]}`
	c, err := DecodeCounted([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	want := &Counted{V: 1, From: "executor@a#00", Adds: []CountAdd{{"s.abc-_9", 1, 1800000000000}, {"l.x.5", -300, 1800000000000}}}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got %+v, want %+v", c, want)
	}
	// At the bounds, and every kind of byte a key may hold.
	most := `{"v":1,"from":"` + strings.Repeat("x", MaxCountFrom) + `","adds":[` +
		strings.TrimSuffix(strings.Repeat(`{"k":"azAZ09._-","n":1099511627776,"until":1},`, MaxCountAdds-1), ",") +
		`,{"k":"` + strings.Repeat("k", MaxCountKey) + `","n":-1099511627776,"until":1}]}`
	if c, err := DecodeCounted([]byte(most)); err != nil || len(c.Adds) != MaxCountAdds {
		t.Errorf("a count at every bound: %v", err)
	}
	adds := strings.Repeat(`{"k":"k","n":1,"until":1},`, MaxCountAdds+1)
	for _, tt := range []struct {
		name, data string
		want       error
	}{
		{"not json", `counts`, ErrMalformed},
		{"a field of another type", `{"v":1,"from":"x","adds":[{"k":"k","n":"1","until":1}]}`, ErrMalformed},
		{"a field twice", `{"v":1,"from":"x","from":"y","adds":[{"k":"k","n":1,"until":1}]}`, ErrMalformed},
		{"another version", `{"v":2,"from":"x","adds":[{"k":"k","n":1,"until":1}]}`, ErrVersion},
		{"no sender", `{"v":1,"adds":[{"k":"k","n":1,"until":1}]}`, ErrInvalid},
		{"a sender too long", `{"v":1,"from":"` + strings.Repeat("x", MaxCountFrom+1) + `","adds":[{"k":"k","n":1,"until":1}]}`, ErrInvalid},
		{"no increment", `{"v":1,"from":"x","adds":[]}`, ErrInvalid},
		{"too many", `{"v":1,"from":"x","adds":[` + strings.TrimSuffix(adds, ",") + `]}`, ErrInvalid},
		{"a wildcard in a key", `{"v":1,"from":"x","adds":[{"k":"s.>","n":1,"until":1}]}`, ErrInvalid},
		{"a key too long", `{"v":1,"from":"x","adds":[{"k":"` + strings.Repeat("k", MaxCountKey+1) + `","n":1,"until":1}]}`, ErrInvalid},
		{"zero", `{"v":1,"from":"x","adds":[{"k":"k","n":0,"until":1}]}`, ErrInvalid},
		{"too much", `{"v":1,"from":"x","adds":[{"k":"k","n":-1099511627777,"until":1}]}`, ErrInvalid},
		{"no end", `{"v":1,"from":"x","adds":[{"k":"k","n":1}]}`, ErrInvalid},
		{"an end before 1970", `{"v":1,"from":"x","adds":[{"k":"k","n":1,"until":-1}]}`, ErrInvalid},
		{"too much more", `{"v":1,"from":"x","adds":[{"k":"k","n":1099511627777,"until":1}]}`, ErrInvalid},
	} {
		if _, err := DecodeCounted([]byte(tt.data)); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
}

// TestCountKeysAreTokens: a key is letters, digits, '.', '_' and '-',
// never a byte next to them, so that it is a subject token and no
// wildcard.
func TestCountKeysAreTokens(t *testing.T) {
	for _, c := range "azAZ09._-" {
		if !ValidCountKey("k" + string(c)) {
			t.Errorf("%q refused", c)
		}
	}
	for _, c := range "`{@[/:*> \x00\x7f" {
		if ValidCountKey("k" + string(c)) {
			t.Errorf("%q taken", c)
		}
	}
}

// FuzzDecodeCounted: count messages come from the bus. Whatever the
// bytes, decoding never panics, and what decodes holds to the bounds
// and encodes to itself.
func FuzzDecodeCounted(f *testing.F) {
	f.Add([]byte(`{"v":1,"from":"executor@a#00","adds":[{"k":"s.abc","n":1,"until":1800000000000}]}`))
	f.Add([]byte(`{"v":1,"from":"x","adds":[{"k":"r.5.k","n":-9,"until":1},{"k":"l.k.5","n":1099511627776,"until":9}]}`))
	f.Add([]byte(`{"v":1e400}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCounted(data)
		if err != nil {
			if c != nil {
				t.Fatal("an error and a count")
			}
			return
		}
		if c.From == "" || len(c.From) > MaxCountFrom || len(c.Adds) == 0 || len(c.Adds) > MaxCountAdds {
			t.Fatalf("out of bounds: %+v", c)
		}
		for _, a := range c.Adds {
			if !ValidCountKey(a.Key) || a.N == 0 || a.N > MaxCountN || a.N < -MaxCountN || a.Until <= 0 {
				t.Fatalf("an increment out of bounds: %+v", a)
			}
		}
		again, err := EncodeCounted(c)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeCounted(again)
		if err != nil || !reflect.DeepEqual(back, c) {
			t.Fatalf("re-encoded %s decodes to %+v, %v; want %+v", again, back, err, c)
		}
	})
}
