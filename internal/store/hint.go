package store

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/aws/smithy-go"
	"google.golang.org/api/googleapi"
)

// Advice for the errors a misconfigured cloud store gives. Each names the
// setting to fix; the SDK's own text (request ids, rule traces, the request
// URL) is left out.
const (
	adviceAWSCreds = "check the AWS credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, " +
		"or the instance role), or add anonymous=true to the URI for a public bucket"
	adviceAWSNoCreds = "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), " +
		"or add anonymous=true to the URI for a public bucket or an emulator that checks none"
	adviceAWSRegion = "no valid AWS region: set AWS_REGION or add region=... to the URI " +
		"(an S3-compatible store also needs endpoint=http://host:port and use_path_style=true)"
	adviceGCSCreds = "check the Google credentials (GOOGLE_APPLICATION_CREDENTIALS, or " +
		"'gcloud auth application-default login'), or add anonymous=true to the URI for a public bucket"
	adviceGCSNoCreds = "no Google credentials found: set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file " +
		"or run 'gcloud auth application-default login' (add anonymous=true to the URI for a public bucket " +
		"or an emulator that checks none)"
)

// errAWSNoCredentials and errGCSNoCredentials report missing credentials,
// errGCSBadCredentialsFile a GOOGLE_APPLICATION_CREDENTIALS that names no
// usable file.
var (
	errAWSNoCredentials      = errors.New(adviceAWSNoCreds)
	errGCSNoCredentials      = errors.New(adviceGCSNoCreds)
	errGCSBadCredentialsFile = errors.New("Google credentials not loaded")
)

// advise describes err, an error of the store at uri, in one line that
// says what to do; "" when err is none of the configuration errors known
// here.
func advise(uri string, err error) string {
	if errors.Is(err, errAWSNoCredentials) || errors.Is(err, errGCSNoCredentials) || errors.Is(err, errGCSBadCredentialsFile) {
		return err.Error()
	}
	bucket := ""
	if u, perr := url.Parse(uri); perr == nil {
		bucket = u.Host
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "TokenRefreshRequired":
			return fmt.Sprintf("credentials refused (%s): %s", ae.ErrorCode(), adviceAWSCreds)
		case "AccessDenied", "Forbidden", "AllAccessDisabled":
			return fmt.Sprintf("access denied to bucket %q (%s): grant these credentials access to it or %s",
				bucket, ae.ErrorCode(), adviceAWSCreds)
		case "NoSuchBucket":
			return fmt.Sprintf("bucket %q does not exist: check the bucket name, and region= and endpoint= in the URI", bucket)
		case "PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraintException":
			return fmt.Sprintf("bucket %q is in another region (%s): set region= in the URI or AWS_REGION", bucket, ae.ErrorCode())
		}
	}
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		switch ge.Code {
		case 401, 403:
			return fmt.Sprintf("access denied to bucket %q (HTTP %d): %s", bucket, ge.Code, adviceGCSCreds)
		}
		if ge.Code == 404 && strings.Contains(ge.Message, "bucket") {
			return fmt.Sprintf("bucket %q does not exist: check the bucket name (and endpoint= in the URI)", bucket)
		}
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "failed to refresh cached credentials"), strings.Contains(msg, "failed to retrieve credentials"),
		strings.Contains(msg, "no EC2 IMDS role found"), strings.Contains(msg, "get identity: get credentials"):
		return adviceAWSNoCreds
	case strings.Contains(msg, "endpoint rule error"), strings.Contains(msg, "Invalid region"),
		strings.Contains(msg, "resolve endpoint"):
		return adviceAWSRegion
	case strings.Contains(msg, "could not find default credentials"):
		return adviceGCSNoCreds
	case strings.Contains(msg, "private key should be a PEM"), strings.Contains(msg, "oauth2: cannot fetch token"):
		return "the Google credentials do not work: " + adviceGCSCreds
	}
	var ne net.Error
	var ue *url.Error
	if errors.As(err, &ne) && errors.As(err, &ue) {
		host := ue.URL
		if u, perr := url.Parse(ue.URL); perr == nil {
			host = u.Scheme + "://" + u.Host
		}
		why := "no answer"
		var oe *net.OpError
		switch {
		case errors.As(err, &oe) && oe.Err != nil:
			why = oe.Err.Error()
			var se interface{ Unwrap() error }
			if errors.As(oe.Err, &se) && se.Unwrap() != nil {
				why = se.Unwrap().Error()
			}
		case ne.Timeout():
			why = "timed out"
		}
		return fmt.Sprintf("cannot reach %s (%s): check endpoint= in the URI and that the store is up", host, why)
	}
	return ""
}
