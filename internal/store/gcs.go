package store

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	"cloud.google.com/go/storage"
	"gocloud.dev/blob"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/gcp"
	"google.golang.org/api/option"
)

// openGCS opens gs://bucket?… with gocloud.dev's gcsblob. On top of
// gcsblob's URL parameters (anonymous, access_id, private_key_path,
// universe_domain, grpc, zonal) it accepts endpoint=<base URL>: the JSON
// API is then reached at <base URL>/storage/v1/ instead of
// storage.googleapis.com (a GCS emulator such as fake-gcs-server, or a
// private GCS-compatible endpoint). With anonymous=true no credentials are
// sent; otherwise the Application Default Credentials are used.
//
// gcsblob also honours the STORAGE_EMULATOR_HOST environment variable
// (process-wide, unauthenticated); endpoint= does the same per URI. Missing
// credentials fail the open with what to set.
//
// The GCS client retries idempotent requests until its context ends; it is
// bounded here to gcsClientAttempts tries, like the AWS SDK's three, and
// the Bucket's own retry policy (Retry) does the rest for every backend.
func openGCS(ctx context.Context, root *url.URL) (*blob.Bucket, error) {
	bkt, err := openGCSBucket(ctx, root)
	if err != nil {
		return nil, err
	}
	var c *storage.Client
	if bkt.As(&c) {
		c.SetRetry(storage.WithMaxAttempts(gcsClientAttempts), storage.WithErrorFunc(func(err error) bool {
			// An endpoint that refuses connections or does not resolve
			// fails at once.
			return !Unreachable(err) && storage.ShouldRetry(err)
		}))
	}
	return bkt, nil
}

// gcsClientAttempts bounds the GCS client's own tries of one request.
const gcsClientAttempts = 3

func openGCSBucket(ctx context.Context, root *url.URL) (*blob.Bucket, error) {
	q := root.Query()
	ep := q.Get("endpoint")
	if ep == "" && (os.Getenv("STORAGE_EMULATOR_HOST") != "" || q.Get("universe_domain") != "") {
		return blob.OpenBucket(ctx, root.String())
	}
	opener := &gcsblob.URLOpener{}
	if ep != "" {
		api, err := gcsJSONEndpoint(ep)
		if err != nil {
			return nil, err
		}
		q.Del("endpoint")
		opener.Options.ClientOptions = []option.ClientOption{option.WithEndpoint(api)}
	}
	anon, _ := strconv.ParseBool(q.Get("anonymous"))
	grpc, _ := strconv.ParseBool(q.Get("grpc"))
	if anon && !grpc {
		// gcsblob would build the same anonymous client on
		// http.DefaultTransport, which waits for an answer forever.
		q.Del("anonymous")
		opener.Client = gcp.NewAnonymousHTTPClient(httpTransport())
	}
	if !anon && q.Get("access_id") != "-" {
		// Resolved here rather than by gcsblob's default opener, which
		// prints a warning to stdout and carries on with empty credentials.
		creds, err := gcp.DefaultCredentials(ctx)
		if err != nil {
			if f := os.Getenv("GOOGLE_APPLICATION_CREDENTIALS"); f != "" {
				return nil, fmt.Errorf("%w: GOOGLE_APPLICATION_CREDENTIALS=%s is not a readable credentials file: point it at a service-account key file",
					errGCSBadCredentialsFile, f)
			}
			return nil, errGCSNoCredentials
		}
		c, err := gcp.NewHTTPClient(httpTransport(), gcp.CredentialsTokenSource(creds))
		if err != nil {
			return nil, err
		}
		opener.Client = c
	}
	u := *root
	u.RawQuery = q.Encode()
	return opener.OpenBucketURL(ctx, &u)
}

// gcsJSONEndpoint turns an endpoint parameter (http://host:port, with or
// without a trailing /storage/v1/) into the JSON API base URL.
func gcsJSONEndpoint(ep string) (string, error) {
	u, err := url.Parse(ep)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("endpoint %q: want http(s)://host[:port]", ep)
	}
	p := strings.TrimSuffix(u.Path, "/")
	if !strings.HasSuffix(p, "/storage/v1") {
		p += "/storage/v1"
	}
	u.Path = p + "/"
	return u.String(), nil
}
