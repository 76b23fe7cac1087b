package config

import (
	"errors"
	"testing"
)

// FuzzParse checks, in both dialects: no panic; an error is an *Error that
// points into the input, and leaves the Config as it was; a success is
// reproduced by String, and String is a fixed point.
func FuzzParse(f *testing.F) {
	for _, tc := range acceptCases {
		f.Add(tc.in)
	}
	for _, tc := range oldErrorCases {
		f.Add(tc.in)
	}
	for _, tc := range newErrorCases {
		f.Add(tc.in)
	}
	f.Add("roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]")
	f.Add("roundup_power2_divisions:[>:2,1:0,32768:1]")
	f.Add("backend:native,backend:cudaMallocAsync")
	f.Add("expandable_segments_reserve_by_class:[,:1,::2,[:3]")
	f.Fuzz(func(t *testing.T, s string) {
		for _, d := range both {
			// Start from a non-default Config so that "unchanged" means
			// something.
			c := fresh(d)
			if err := c.Apply("expandable_segments:True,max_split_size_mb:64,roundup_power2_divisions:4"); err != nil {
				t.Fatal(err)
			}
			before := c
			err := c.Apply(s)
			if err != nil {
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("%s %q: error %T is not *Error", dialectName(d), s, err)
				}
				if e.Offset < 0 || e.Offset > len(s) || e.Input != s {
					t.Fatalf("%s %q: bad error position %d in %q", dialectName(d), s, e.Offset, e.Input)
				}
				_ = e.Error()
				if c != before {
					t.Fatalf("%s %q: failed Apply changed the Config", dialectName(d), s)
				}
				continue
			}
			str := c.String()
			r, err := reparse(c)
			if err != nil {
				t.Fatalf("%s %q: String %q does not parse: %v", dialectName(d), s, str, err)
			}
			if r != c {
				t.Fatalf("%s %q: String %q parses to\n%+v\nwant\n%+v", dialectName(d), s, str, r, c)
			}
			if r.String() != str {
				t.Fatalf("%s %q: String not canonical: %q then %q", dialectName(d), s, str, r.String())
			}
		}
	})
}
