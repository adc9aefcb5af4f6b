package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"cloud.google.com/go/storage"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"
)

// Generation names one stored version of an object, as PutIfMatch
// compares it: the ETag on S3, the object generation on GCS, a hash of
// the content on file:// and mem:// (there, as with S3's ETags of
// single-request uploads, two versions with equal content are the same
// generation).
type Generation string

// GetWithGeneration reads a whole object and the generation it read, for
// a later PutIfMatch.
func (b *Bucket) GetWithGeneration(ctx context.Context, key string) ([]byte, Generation, error) {
	done, err := b.begin("get", key, false)
	if err != nil {
		return nil, "", err
	}
	var data []byte
	var gen Generation
	err = b.retrying(ctx, "get", key, func() (err error) {
		data, gen, err = b.readGeneration(ctx, key)
		return err
	})
	return data, gen, done(err)
}

func (b *Bucket) readGeneration(ctx context.Context, key string) ([]byte, Generation, error) {
	if b.uri.Scheme != "s3" && b.uri.Scheme != "gs" {
		data, err := b.bkt.ReadAll(ctx, b.prefix+key)
		if err != nil {
			return nil, "", err
		}
		return data, contentGeneration(data), nil
	}
	r, err := b.bkt.NewReader(ctx, b.prefix+key, nil)
	if err != nil {
		return nil, "", err
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, "", err
	}
	var gen Generation
	if b.uri.Scheme == "s3" {
		var out s3.GetObjectOutput
		if r.As(&out) {
			gen = Generation(aws.ToString(out.ETag))
		}
	} else {
		var gr *storage.Reader
		if r.As(&gr) && gr.Attrs.Generation != 0 {
			gen = Generation(strconv.FormatInt(gr.Attrs.Generation, 10))
		}
	}
	if gen == "" {
		return nil, "", fmt.Errorf("the store answered without an ETag or generation for %s: conditional replacement (PutIfMatch) is not possible on it", key)
	}
	return data, gen, nil
}

// contentGeneration is the generation of an object on file:// and mem://.
func contentGeneration(data []byte) Generation {
	h := sha256.Sum256(data)
	return Generation(hex.EncodeToString(h[:16]))
}

// errNoGeneration is PutIfMatch's answer to an empty generation.
var errNoGeneration = errors.New("PutIfMatch needs the generation of the object it replaces (GetWithGeneration); PutIfAbsent creates one")

// PutIfMatch replaces key with data only if the object under key is
// still generation gen (as GetWithGeneration read it), atomically
// across writers: of writers replacing one generation, one wins, and the
// others get an error matching ErrPreconditionFailed (as does a key that
// no longer exists), so each can read the new generation and try again.
// S3 sends If-Match: <ETag> (stores that ignore the header, which S3
// itself did before November 2024, make it a plain put); GCS an
// ifGenerationMatch precondition; file:// claims the generation with
// link(2) and renames over the target (see putLocalIfMatch: atomic
// between the processes of one host, and it reads the current object to
// compare it, so it is meant for small records); mem:// compares under a
// lock. An ambiguous outcome is settled by reading the key back, as for
// PutIfAbsent: an object holding exactly data is taken for this write, so
// data must differ from what any other writer writes (carry a writer id
// or a nonce). A plain Put or Delete racing with it is not ordered
// against it on file://.
func (b *Bucket) PutIfMatch(ctx context.Context, key string, data []byte, gen Generation) error {
	done, err := b.begin("put_if_match", key, false)
	if err != nil {
		return err
	}
	if gen == "" {
		return done(errNoGeneration)
	}
	err = b.putConditional(ctx, "put_if_match", key, data, func() error {
		return b.write(ctx, key, data, writeCond{match: gen})
	})
	if err != nil && classify(err) == NotFound {
		// The key is gone (S3 answers If-Match on a missing key with 404).
		err = fmt.Errorf("%w: %s does not exist", ErrPreconditionFailed, key)
	}
	return done(err)
}

// writeCond is the precondition of a write: none, no object (absent), or
// the object's generation (match).
type writeCond struct {
	absent bool
	match  Generation
}

// memCAS orders PutIfMatch on mem:// buckets (one process).
var memCAS sync.Mutex

// writeIfMatch is write with a generation precondition on mem://, S3 and
// GCS (file:// stages and swaps in localWriter).
func (b *Bucket) writeIfMatch(ctx context.Context, key string, data []byte, gen Generation) error {
	switch b.uri.Scheme {
	case "s3", "gs":
	default: // mem://
		memCAS.Lock()
		defer memCAS.Unlock()
		cur, err := b.bkt.ReadAll(ctx, b.prefix+key)
		if err != nil {
			if classify(err) == NotFound {
				return fmt.Errorf("%w: %s does not exist", ErrPreconditionFailed, key)
			}
			return err
		}
		if contentGeneration(cur) != gen {
			return fmt.Errorf("%w: %s was replaced", ErrPreconditionFailed, key)
		}
		return b.bkt.WriteAll(ctx, b.prefix+key, data, &blob.WriterOptions{ContentType: "application/octet-stream"})
	}
	return b.writeBlob(ctx, key, data, &blob.WriterOptions{BeforeWrite: func(as func(any) bool) error {
		if b.uri.Scheme == "s3" {
			var in *transfermanager.UploadObjectInput
			if !as(&in) {
				return errors.New("s3 upload request not reachable for If-Match")
			}
			in.IfMatch = aws.String(string(gen))
			return nil
		}
		g, err := strconv.ParseInt(string(gen), 10, 64)
		if err != nil {
			return fmt.Errorf("GCS generation %q: %w", gen, err)
		}
		var obj **storage.ObjectHandle
		if !as(&obj) {
			return errors.New("gcs object handle not reachable for ifGenerationMatch")
		}
		*obj = (*obj).If(storage.Conditions{GenerationMatch: g})
		return nil
	}})
}
