package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"golang.org/x/sync/errgroup"
)

// s3DeleteBatch is S3's DeleteObjects limit.
const s3DeleteBatch = 1000

// DeleteMany deletes keys; a key that does not exist is not an error. On
// S3 it sends DeleteObjects requests of up to 1000 keys (one request where
// Delete needs a HEAD and a DELETE per key); elsewhere it deletes key by
// key, up to 8 at a time. Every key is validated (and fault-injected as op
// "delete") before any request. It returns the first failure, naming its
// key; keys of a failed request may or may not be gone.
func (b *Bucket) DeleteMany(ctx context.Context, keys []string) error {
	for _, k := range keys {
		err := checkKey(k)
		if err == nil && b.fault != nil {
			err = b.fault("delete", k)
		}
		if err != nil {
			return b.wrap("delete", k, err)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	var client *s3.Client
	if b.uri.Scheme == "s3" && b.bkt.As(&client) {
		return b.deleteS3(ctx, client, keys)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, k := range keys {
		g.Go(func() error {
			start := time.Now()
			err := b.bkt.Delete(gctx, b.prefix+k)
			if err != nil && classify(err) == NotFound {
				err = nil
			}
			if err != nil {
				err = b.wrap("delete", k, err)
			}
			b.metrics.observe("delete", start, err)
			return err
		})
	}
	return g.Wait()
}

func (b *Bucket) deleteS3(ctx context.Context, client *s3.Client, keys []string) error {
	var mu sync.Mutex
	var first error
	for i := 0; i < len(keys); i += s3DeleteBatch {
		batch := keys[i:min(i+s3DeleteBatch, len(keys))]
		objs := make([]types.ObjectIdentifier, len(batch))
		for j, k := range batch {
			objs[j] = types.ObjectIdentifier{Key: aws.String(b.prefix + k)}
		}
		start := time.Now()
		out, err := client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: aws.String(b.uri.Host),
			Delete: &types.Delete{Objects: objs, Quiet: aws.Bool(true)},
		})
		if err != nil {
			err = b.wrap("delete_objects", batch[0], err)
		}
		b.metrics.observe("delete_objects", start, err)
		if err != nil {
			return err
		}
		for _, e := range out.Errors {
			if aws.ToString(e.Code) == "NoSuchKey" {
				continue
			}
			key := aws.ToString(e.Key)
			if len(key) >= len(b.prefix) {
				key = key[len(b.prefix):]
			}
			mu.Lock()
			if first == nil {
				first = &Error{Op: "delete", URI: b.URI(), Key: key, Code: codeOfS3(aws.ToString(e.Code)),
					Err: fmt.Errorf("%s: %s", aws.ToString(e.Code), aws.ToString(e.Message))}
			}
			mu.Unlock()
		}
		if first != nil {
			return first
		}
	}
	return nil
}

func codeOfS3(code string) ErrorCode {
	switch code {
	case "AccessDenied":
		return PermissionDenied
	case "SlowDown":
		return Throttled
	case "InternalError", "ServiceUnavailable":
		return Unavailable
	}
	return Unknown
}
