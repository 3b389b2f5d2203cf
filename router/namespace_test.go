package router

import "testing"

func TestNamespacedQueueRoundTrip(t *testing.T) {
	for _, c := range []struct{ ns, q, stored string }{
		{"default", "emails", "emails"},
		{"", "emails", "emails"},
		{"acme", "emails", "acme/emails"},
		{"a-1", "x:y.z", "a-1/x:y.z"},
	} {
		got := NamespacedQueue(c.ns, c.q)
		if got != c.stored {
			t.Fatalf("NamespacedQueue(%q, %q) = %q, want %q", c.ns, c.q, got, c.stored)
		}
		ns, q := SplitQueue(got)
		want := c.ns
		if want == "" {
			want = DefaultNamespace
		}
		if ns != want || q != c.q || DisplayQueue(got) != c.q {
			t.Fatalf("SplitQueue(%q) = %q, %q", got, ns, q)
		}
		if !QueueInNamespace(got, want) {
			t.Fatalf("%q not in namespace %q", got, want)
		}
		if err := ValidateStoredQueue(got); err != nil {
			t.Fatalf("ValidateStoredQueue(%q): %v", got, err)
		}
	}
}

func TestQueueInNamespaceNeverCrosses(t *testing.T) {
	for _, c := range []struct {
		stored, ns string
		in         bool
	}{
		{"emails", "default", true},
		{"acme/emails", "default", false},
		{"acme/emails", "acme", true},
		{"acme/emails", "acm", false},
		{"acmex/emails", "acme", false},
		{"emails", "acme", false},
	} {
		if got := QueueInNamespace(c.stored, c.ns); got != c.in {
			t.Errorf("QueueInNamespace(%q, %q) = %v, want %v", c.stored, c.ns, got, c.in)
		}
	}
}

func TestValidateNamespaceAndStoredQueue(t *testing.T) {
	for _, ok := range []string{"a", "acme", "team-1", "t_2", "0x"} {
		if err := ValidateNamespace(ok); err != nil {
			t.Errorf("ValidateNamespace(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Acme", "-a", "_a", "a/b", "a b", "a.b", string(make([]byte, 64))} {
		if ValidateNamespace(bad) == nil {
			t.Errorf("ValidateNamespace(%q) accepted", bad)
		}
	}
	for _, bad := range []string{"", "/emails", "default/emails", "Acme/emails", "acme/", "acme/a/b", "a b"} {
		if ValidateStoredQueue(bad) == nil {
			t.Errorf("ValidateStoredQueue(%q) accepted", bad)
		}
	}
}
