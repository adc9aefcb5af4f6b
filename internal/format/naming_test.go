package format

import (
	"errors"
	"math"
	"testing"
)

func TestManifestNameRoundTrip(t *testing.T) {
	for _, n := range []Naming{NamingV1, NamingV2} {
		for _, v := range []uint64{1, 2, 9, 10, 12345, math.MaxUint32 + 7} {
			key := ManifestKey(n, v)
			got, gn, err := ParseManifestName(key)
			if err != nil || got != v || gn != n {
				t.Fatalf("%s v%d: key %q parsed as (%d, %s, %v)", n, v, key, got, gn, err)
			}
		}
	}
}

func TestManifestNamesMatchLance(t *testing.T) {
	// Names seen in lance 8.0.0 tables (see internal/format/FORMAT.md, Keys).
	cases := []struct {
		name    string
		version uint64
		naming  Naming
	}{
		{"18446744073709551614.manifest", 1, NamingV2},
		{"_versions/18446744073709551606.manifest", 9, NamingV2},
		{"s3://b/t.lance/_versions/18446744073709551609.manifest", 6, NamingV2},
		{"1.manifest", 1, NamingV1},
		{"_versions/123.manifest", 123, NamingV1},
	}
	for _, c := range cases {
		v, n, err := ParseManifestName(c.name)
		if err != nil || v != c.version || n != c.naming {
			t.Errorf("%q: got (%d, %s, %v), want (%d, %s)", c.name, v, n, err, c.version, c.naming)
		}
	}
	if got := ManifestName(NamingV2, 1); got != "18446744073709551614.manifest" {
		t.Errorf("V2 name of version 1 = %q", got)
	}
	if got := ManifestKey(NamingV1, 7); got != "_versions/7.manifest" {
		t.Errorf("V1 key of version 7 = %q", got)
	}
}

func TestParseManifestNameRejectsNonManifests(t *testing.T) {
	for _, name := range []string{
		"d9223372036854775809.manifest", // detached
		"_versions/d5.manifest",
		"latest_version_hint.json",
		".tmp_3.manifest_5f0e",
		"3.manifest-0b9e2c1a-1111-2222-3333-444455556666", // external-store staging
		"18446744073709551614.manifest-0b9e2c1a",          // rename staging
		".manifest",
		"abc.manifest",
		"-1.manifest",
		"+1.manifest",
		"1.2.manifest",
		"99999999999999999999.manifest", // 20 digits but > MaxUint64
		"123456789012345678901.manifest",
		"",
	} {
		_, _, err := ParseManifestName(name)
		if !errors.Is(err, ErrNotManifest) {
			t.Errorf("%q: err = %v, want ErrNotManifest", name, err)
		}
	}
}

func TestDetectNaming(t *testing.T) {
	n, err := DetectNaming([]string{"latest_version_hint.json", "18446744073709551614.manifest", "d9.manifest"})
	if err != nil || n != NamingV2 {
		t.Fatalf("V2 listing: %s, %v", n, err)
	}
	n, err = DetectNaming([]string{"_versions/1.manifest", "_versions/2.manifest"})
	if err != nil || n != NamingV1 {
		t.Fatalf("V1 listing: %s, %v", n, err)
	}
	n, err = DetectNaming([]string{"latest_version_hint.json"})
	if err != nil || n != 0 {
		t.Fatalf("empty listing: %s, %v", n, err)
	}
	if _, err := DetectNaming([]string{"1.manifest", "18446744073709551613.manifest"}); !errors.Is(err, ErrMixedNaming) {
		t.Fatalf("mixed listing: err = %v", err)
	}
}

func FuzzParseManifestName(f *testing.F) {
	for _, s := range []string{"1.manifest", "18446744073709551614.manifest", "d1.manifest", "_versions/.tmp", "00000000000000000000.manifest", "1.manifest-x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		v, n, err := ParseManifestName(name)
		if err != nil {
			if !errors.Is(err, ErrNotManifest) {
				t.Fatalf("%q: error %v does not wrap ErrNotManifest", name, err)
			}
			return
		}
		// A parsed name must map back to a name of the same version.
		v2, n2, err := ParseManifestName(ManifestName(n, v))
		if err != nil || v2 != v || n2 != n {
			t.Fatalf("%q -> (%d, %s) does not round-trip: (%d, %s, %v)", name, v, n, v2, n2, err)
		}
	})
}
