package store

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/logging"
	gcaws "gocloud.dev/aws"
	"gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"
)

// openS3 opens an s3:// root (no path) the way gocloud.dev's s3blob URL
// opener does, with the same query parameters (ssetype, kmskeyid,
// accelerate, disable_https, use_path_style or s3ForcePathStyle, and the
// gocloud.dev/aws config parameters such as endpoint, region, profile,
// anonymous, request_checksum_calculation, response_checksum_validation),
// but with the AWS SDK's logger routed through slog: the SDK's default
// logger writes plain-text lines to stderr.
func openS3(ctx context.Context, u *url.URL) (*blob.Bucket, error) {
	q := u.Query()
	var opts s3blob.Options
	if v := q.Get("ssetype"); v != "" {
		q.Del("ssetype")
		var ok bool
		for _, t := range types.ServerSideEncryptionAes256.Values() {
			if strings.EqualFold(string(t), v) {
				opts.EncryptionType, ok = t, true
			}
		}
		if !ok {
			return nil, fmt.Errorf("ssetype=%q: want one of %v", v, types.ServerSideEncryptionAes256.Values())
		}
	}
	if v := q.Get("kmskeyid"); v != "" {
		q.Del("kmskeyid")
		opts.KMSEncryptionID = v
	}
	var s3opts []func(*s3.Options)
	for _, key := range []string{"accelerate", "disable_https", "use_path_style", "s3ForcePathStyle"} {
		v := q.Get(key)
		if v == "" {
			continue
		}
		q.Del(key)
		on, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: want true or false", key, v)
		}
		switch key {
		case "accelerate":
			s3opts = append(s3opts, func(o *s3.Options) { o.UseAccelerate = on })
		case "disable_https":
			s3opts = append(s3opts, func(o *s3.Options) { o.EndpointOptions.DisableHTTPS = on })
		default:
			s3opts = append(s3opts, func(o *s3.Options) { o.UsePathStyle = on })
		}
	}
	cfg, err := gcaws.V2ConfigFromURLParams(ctx, q)
	if err != nil {
		return nil, err
	}
	cfg.Logger = sdkLogger{}
	cfg.HTTPClient = awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = connectTimeout }).
		WithTransportOptions(func(tr *http.Transport) { tr.ResponseHeaderTimeout = responseHeaderTimeout })
	if anon, _ := strconv.ParseBool(q.Get("anonymous")); !anon && q.Get("role") == "" {
		// The default credential chain (environment, shared files, SSO,
		// container and instance metadata) takes the logger it is loaded
		// with: its instance-metadata client would log the SDK's IMDSv1
		// fallback warning as plain text on stderr. Loaded again with
		// the slog logger.
		lo := []func(*config.LoadOptions) error{config.WithLogger(sdkLogger{}), config.WithRegion(cfg.Region)}
		if p := q.Get("profile"); p != "" {
			lo = append(lo, config.WithSharedConfigProfile(p))
		}
		base, err := config.LoadDefaultConfig(ctx, lo...)
		if err != nil {
			return nil, err
		}
		cfg.Credentials = base.Credentials
	}
	// The SDK's retryer retries dial errors too; an endpoint that refuses
	// connections or does not resolve fails at once (5xx answers, throttling
	// and resets are still retried).
	cfg.Retryer = func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.Retryables = append([]retry.IsErrorRetryable{retry.IsErrorRetryableFunc(func(err error) aws.Ternary {
				if Unreachable(err) {
					return aws.FalseTernary
				}
				return aws.UnknownTernary
			})}, o.Retryables...)
		})
	}
	// The upload manager does not take the request checksum setting from
	// the client; s3blob passes it on explicitly.
	opts.RequestChecksumCalculation = cfg.RequestChecksumCalculation
	return s3blob.OpenBucket(ctx, s3.NewFromConfig(cfg, s3opts...), u.Host, &opts)
}

// sdkLogger is the AWS SDK's logger (smithy-go logging.Logger) writing to
// slog's default logger: SDK warnings at Warn, everything else at Debug.
type sdkLogger struct{}

func (sdkLogger) Logf(c logging.Classification, format string, v ...any) {
	level := slog.LevelDebug
	if c == logging.Warn && !strings.Contains(format, "falling back to IMDSv1") {
		// The IMDSv1 fallback is the SDK's normal path off EC2 (and a
		// missing-credentials error follows if it finds none): Debug.
		level = slog.LevelWarn
	}
	ctx := context.Background()
	l := slog.Default()
	if !l.Enabled(ctx, level) {
		return
	}
	l.Log(ctx, level, fmt.Sprintf(format, v...), "component", "aws-sdk")
}
