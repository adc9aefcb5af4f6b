package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/aws/smithy-go"
	"gocloud.dev/gcerrors"
	"google.golang.org/api/googleapi"
)

// ErrorCode classifies a store error by what the caller should do about it.
type ErrorCode int

// Error codes.
const (
	Unknown ErrorCode = iota
	NotFound
	PreconditionFailed
	Unavailable
	Throttled
	PermissionDenied
)

func (c ErrorCode) String() string {
	switch c {
	case NotFound:
		return "not_found"
	case PreconditionFailed:
		return "precondition_failed"
	case Unavailable:
		return "unavailable"
	case Throttled:
		return "throttled"
	case PermissionDenied:
		return "permission_denied"
	default:
		return "unknown"
	}
}

// Sentinels. errors.Is works on every error a Bucket returns.
var (
	ErrNotFound           = errors.New("store: not found")
	ErrPreconditionFailed = errors.New("store: precondition failed")
	ErrInvalidKey         = errors.New("store: invalid key")
	ErrClosed             = errors.New("store: bucket closed")
)

// Error is the error type of every Bucket operation.
type Error struct {
	Op   string // "get", "put_if_absent", ...
	URI  string // bucket URI
	Key  string // key relative to the bucket root
	Code ErrorCode
	Err  error
}

// Error is one line: the operation, the table's identity (no query string
// or credentials) and, for a misconfigured store, what to fix instead of
// the SDK's message.
func (e *Error) Error() string {
	var why any = e.Err
	if a := advise(e.URI, e.Err); a != "" {
		why = a
	}
	uri := CanonicalURI(e.URI)
	if e.Key == "" {
		return fmt.Sprintf("store: %s %s: %v", e.Op, uri, why)
	}
	return fmt.Sprintf("store: %s %s (key %q): %v", e.Op, uri, e.Key, why)
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrNotFound) and errors.Is(err,
// ErrPreconditionFailed) true for errors of those codes.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Code == NotFound
	case ErrPreconditionFailed:
		return e.Code == PreconditionFailed
	}
	return false
}

// CodeOf classifies err. Errors from a Bucket carry their code; other errors
// are classified by their underlying type.
func CodeOf(err error) ErrorCode {
	if err == nil {
		return Unknown
	}
	var se *Error
	if errors.As(err, &se) {
		return se.Code
	}
	return classify(err)
}

// Unreachable reports whether err says the store cannot be reached at all:
// the connection was refused, the host or network is unreachable, the host
// name does not resolve, no connection was made within connectTimeout, or
// the endpoint sent no answer within responseHeaderTimeout. Retrying within
// seconds does not help.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
		return true
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" && oe.Timeout() {
		return true
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if strings.Contains(e.Error(), "timeout awaiting response headers") {
			return true
		}
	}
	var de *net.DNSError
	return errors.As(err, &de) && !de.IsTemporary && !de.IsTimeout
}

// connectTimeout bounds the TCP (and TLS) connect to a cloud store, and
// responseHeaderTimeout the wait for the answer to a request once it is
// sent: an endpoint that drops packets or accepts connections and never
// answers fails a request in bounded time instead of hanging it. Variables
// so that tests can shorten them.
var (
	connectTimeout        = 10 * time.Second
	responseHeaderTimeout = 30 * time.Second
)

// httpTransport is the HTTP transport of the GCS client: Go's default
// transport with connectTimeout and responseHeaderTimeout (the S3 client
// gets the same bounds through its own buildable client).
func httpTransport() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = connectTimeout
	tr.ResponseHeaderTimeout = responseHeaderTimeout
	return tr
}

func classify(err error) ErrorCode {
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, os.ErrNotExist):
		return NotFound
	case errors.Is(err, ErrPreconditionFailed), errors.Is(err, os.ErrExist):
		return PreconditionFailed
	case errors.Is(err, os.ErrPermission):
		return PermissionDenied
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.ErrUnexpectedEOF): // a body that ended short
		return Unavailable
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests":
			return Throttled
		case "ServiceUnavailable", "InternalError", "InternalServerError", "RequestTimeout", "ConditionalRequestConflict":
			return Unavailable
		case "PreconditionFailed":
			return PreconditionFailed
		case "NoSuchKey", "NotFound", "NoSuchBucket":
			return NotFound
		case "AccessDenied", "Forbidden", "AllAccessDisabled", "InvalidAccessKeyId", "SignatureDoesNotMatch",
			"ExpiredToken", "InvalidToken":
			return PermissionDenied
		}
	}
	switch gcerrors.Code(err) {
	case gcerrors.NotFound:
		return NotFound
	case gcerrors.FailedPrecondition, gcerrors.AlreadyExists:
		return PreconditionFailed
	case gcerrors.PermissionDenied:
		return PermissionDenied
	case gcerrors.ResourceExhausted:
		return Throttled
	case gcerrors.DeadlineExceeded, gcerrors.Internal:
		return Unavailable
	}
	if c := classifyStatus(err); c != Unknown {
		return c
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return Unavailable
	}
	return Unknown
}

// classifyStatus classifies an HTTP answer by its status code: the AWS SDK
// (a HEAD's error has no body, so no error code) and the GCS client
// (googleapi.Error) both carry it.
func classifyStatus(err error) ErrorCode {
	status := 0
	var ge *googleapi.Error
	var he interface{ HTTPStatusCode() int }
	switch {
	case errors.As(err, &ge):
		status = ge.Code
	case errors.As(err, &he):
		status = he.HTTPStatusCode()
	}
	switch status {
	case http.StatusTooManyRequests:
		return Throttled
	case http.StatusRequestTimeout, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return Unavailable
	case http.StatusNotFound:
		return NotFound
	case http.StatusPreconditionFailed:
		return PreconditionFailed
	case http.StatusForbidden, http.StatusUnauthorized:
		return PermissionDenied
	}
	return Unknown
}

// isConditionalConflict reports S3's 409 ConditionalRequestConflict, which
// means a concurrent conditional write was in progress: retry.
func isConditionalConflict(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "ConditionalRequestConflict"
}
