package storetest

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/google/uuid"
)

// gcsXML serves the object writes of GCS's XML API that fake-gcs-server
// v1.56.1 does not: a plain PUT /<bucket>/<object> (it answers 400 "invalid
// uploadType" unless the request carries a V4 signature, and then ignores
// preconditions) and XML multipart uploads (POST ?uploads, PUT
// ?partNumber&uploadId, POST ?uploadId, DELETE ?uploadId). Real Lance
// (object_store's GCS client) writes only through these.
//
// Each is translated into a JSON-API upload on the emulator, which enforces
// generation preconditions atomically, following GCS's documented XML-API
// semantics (https://cloud.google.com/storage/docs/xml-api/put-object-upload,
// https://cloud.google.com/storage/docs/multipart-uploads):
// x-goog-if-generation-match becomes ifGenerationMatch (0: create only if
// absent); success is 200 with ETag (quoted hex MD5), x-goog-generation,
// x-goog-metageneration and x-goog-hash; a failed precondition is 412 with
// an XML <Error><Code>PreconditionFailed</Code>. Reads, HEAD, DELETE and
// listings pass through to fake-gcs-server's own XML-API routes.
type gcsXML struct {
	next   http.Handler
	bucket string

	mu      sync.Mutex
	uploads map[string]*xmlUpload
}

type xmlUpload struct {
	name, contentType, ifGen string
	parts                    map[int][]byte
}

func newGCSXML(next http.Handler, bucket string) *gcsXML {
	return &gcsXML{next: next, bucket: bucket, uploads: map[string]*xmlUpload{}}
}

func (x *gcsXML) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.EscapedPath()
	pre := "/" + x.bucket + "/"
	if !strings.HasPrefix(p, pre) || (r.Method != http.MethodPut && r.Method != http.MethodPost && r.Method != http.MethodDelete) {
		x.next.ServeHTTP(w, r)
		return
	}
	q := r.URL.Query()
	if q.Get("X-Goog-Algorithm") != "" {
		x.next.ServeHTTP(w, r) // a signed-URL request: fake-gcs-server's own
		return
	}
	name, err := url.PathUnescape(strings.TrimPrefix(p, pre))
	if err != nil || name == "" {
		xmlError(w, http.StatusBadRequest, "InvalidArgument", "bad object name")
		return
	}
	switch {
	case r.Method == http.MethodPost && q.Has("uploads"):
		id := uuid.NewString()
		x.mu.Lock()
		x.uploads[id] = &xmlUpload{name: name, contentType: r.Header.Get("Content-Type"),
			ifGen: r.Header.Get("X-Goog-If-Generation-Match"), parts: map[int][]byte{}}
		x.mu.Unlock()
		writeXML(w, struct {
			XMLName  xml.Name `xml:"InitiateMultipartUploadResult"`
			Bucket   string
			Key      string
			UploadID string `xml:"UploadId"`
		}{Bucket: x.bucket, Key: name, UploadID: id})
	case r.Method == http.MethodPut && q.Has("uploadId"):
		n, err := strconv.Atoi(q.Get("partNumber"))
		data, rerr := io.ReadAll(r.Body)
		if err != nil || n < 1 || n > 10000 || rerr != nil {
			xmlError(w, http.StatusBadRequest, "InvalidArgument", "bad part")
			return
		}
		x.mu.Lock()
		u := x.uploads[q.Get("uploadId")]
		if u != nil {
			u.parts[n] = data
		}
		x.mu.Unlock()
		if u == nil {
			xmlError(w, http.StatusNotFound, "NoSuchUpload", "The requested upload was not found.")
			return
		}
		sum := md5.Sum(data)
		w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:])+`"`)
		w.WriteHeader(http.StatusOK)
	case r.Method == http.MethodPost && q.Has("uploadId"):
		var done struct {
			Parts []struct {
				PartNumber int
			} `xml:"Part"`
		}
		body, _ := io.ReadAll(r.Body)
		if err := xml.Unmarshal(body, &done); err != nil {
			xmlError(w, http.StatusBadRequest, "MalformedXML", err.Error())
			return
		}
		id := q.Get("uploadId")
		x.mu.Lock()
		u := x.uploads[id]
		delete(x.uploads, id)
		x.mu.Unlock()
		if u == nil {
			xmlError(w, http.StatusNotFound, "NoSuchUpload", "The requested upload was not found.")
			return
		}
		var all []byte
		nums := make([]int, 0, len(done.Parts))
		for _, pt := range done.Parts {
			nums = append(nums, pt.PartNumber)
		}
		if !slices.IsSorted(nums) {
			xmlError(w, http.StatusBadRequest, "InvalidPartOrder", "parts must be ascending")
			return
		}
		for _, n := range nums {
			data, ok := u.parts[n]
			if !ok {
				xmlError(w, http.StatusBadRequest, "InvalidPart", fmt.Sprintf("part %d was not uploaded", n))
				return
			}
			all = append(all, data...)
		}
		x.create(w, r, u.name, u.contentType, u.ifGen, all, func(obj gcsObject) {
			writeXML(w, struct {
				XMLName xml.Name `xml:"CompleteMultipartUploadResult"`
				Bucket  string
				Key     string
				ETag    string
			}{Bucket: x.bucket, Key: u.name, ETag: obj.etag})
		})
	case r.Method == http.MethodDelete && q.Has("uploadId"):
		x.mu.Lock()
		delete(x.uploads, q.Get("uploadId"))
		x.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPut && r.Header.Get("X-Goog-Copy-Source") == "":
		data, err := io.ReadAll(r.Body)
		if err != nil {
			xmlError(w, http.StatusBadRequest, "IncompleteBody", err.Error())
			return
		}
		x.create(w, r, name, r.Header.Get("Content-Type"), r.Header.Get("X-Goog-If-Generation-Match"), data, func(gcsObject) {
			w.WriteHeader(http.StatusOK)
		})
	case r.Method == http.MethodPut:
		xmlError(w, http.StatusNotImplemented, "NotImplemented", "copy is not emulated")
	default:
		x.next.ServeHTTP(w, r)
	}
}

type gcsObject struct {
	etag string
}

// create uploads data as name through the JSON API with the generation
// precondition ifGen ("" for none), then answers like the XML API: headers,
// then ok writes the body.
func (x *gcsXML) create(w http.ResponseWriter, r *http.Request, name, contentType, ifGen string, data []byte, ok func(gcsObject)) {
	q := url.Values{"uploadType": {"media"}, "name": {name}}
	if ifGen != "" {
		q.Set("ifGenerationMatch", ifGen)
	}
	req := httptest.NewRequestWithContext(r.Context(), http.MethodPost, "/upload/storage/v1/b/"+url.PathEscape(x.bucket)+"/o?"+q.Encode(), bytes.NewReader(data))
	req.Host = r.Host
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	req.Header.Set("Content-Type", contentType)
	rec := httptest.NewRecorder()
	x.next.ServeHTTP(rec, req)
	switch rec.Code {
	case http.StatusOK:
	case http.StatusPreconditionFailed:
		xmlError(w, http.StatusPreconditionFailed, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold.")
		return
	default:
		xmlError(w, rec.Code, "InternalError", strings.TrimSpace(rec.Body.String()))
		return
	}
	var res struct {
		Generation     string `json:"generation"`
		Metageneration string `json:"metageneration"`
		Md5Hash        string `json:"md5Hash"`
		Crc32c         string `json:"crc32c"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &res)
	sum := md5.Sum(data)
	obj := gcsObject{etag: `"` + hex.EncodeToString(sum[:]) + `"`}
	w.Header().Set("ETag", obj.etag)
	w.Header().Set("X-Goog-Generation", res.Generation)
	if res.Metageneration == "" {
		res.Metageneration = "1"
	}
	w.Header().Set("X-Goog-Metageneration", res.Metageneration)
	w.Header().Set("X-Goog-Hash", "crc32c="+res.Crc32c+",md5="+res.Md5Hash)
	ok(obj)
}

func writeXML(w http.ResponseWriter, v any) {
	b, err := xml.Marshal(v)
	if err != nil {
		xmlError(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/xml; charset=UTF-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(b)
}

func xmlError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/xml; charset=UTF-8")
	w.WriteHeader(status)
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(msg))
	fmt.Fprintf(w, "<?xml version='1.0' encoding='UTF-8'?><Error><Code>%s</Code><Message>%s</Message></Error>", code, b.String())
}
