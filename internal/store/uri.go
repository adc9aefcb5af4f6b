package store

import (
	"net/url"
	"path/filepath"
	"strings"
)

// LocalURI turns a local path, absolute or relative to the working
// directory, into a file:///abs/path URI ('%' and '#' in the path escaped,
// so they stay part of it); anything with a scheme is returned unchanged.
func LocalURI(uri string) string {
	if uri == "" || strings.Contains(uri, "://") {
		return uri
	}
	abs, err := filepath.Abs(uri)
	if err != nil {
		return uri
	}
	return "file://" + localPathEscaper.Replace(filepath.ToSlash(abs))
}

var localPathEscaper = strings.NewReplacer("%", "%25", "#", "%23")

// CanonicalURI is a table's identity in logs, task ids, journal keys and
// metric labels: the URI without its query string (connection options such
// as endpoint and region) and without user info (credentials), with no
// trailing slash; a local path becomes file:///abs/path.
func CanonicalURI(uri string) string {
	uri = LocalURI(uri)
	u, err := url.Parse(uri)
	if err != nil {
		if i := strings.IndexByte(uri, '?'); i >= 0 {
			uri = uri[:i]
		}
		return strings.TrimRight(uri, "/")
	}
	u.RawQuery, u.ForceQuery, u.User, u.Fragment, u.RawFragment = "", false, nil, "", ""
	return strings.TrimRight(u.String(), "/")
}
