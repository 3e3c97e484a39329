package objectstore_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/binary"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/objectstore/s3test"
)

// bodyRecorder records, for every PUT that carries a body (PutObject, UploadPart), its
// X-Amz-Content-Sha256, Content-MD5 and x-amz-checksum-crc32c headers, the headers its
// signature covers and the MD5 and CRC32C of the body actually sent. It can also play a server
// that predates the flexible checksums at CreateMultipartUpload: one that does not say it
// took x-amz-checksum-algorithm (ignoreAlgorithm: the answer's header is removed; versitygw
// did take it, so parts without a CRC32C would be refused in that upload) or refuses it
// (refuseAlgorithm: 400 InvalidArgument, the request not forwarded).
type bodyRecorder struct {
	next                             s3.HTTPClient
	ignoreAlgorithm, refuseAlgorithm bool
	mu                               sync.Mutex
	puts                             []recordedPut
	createsWithAlgorithm             int
}

type recordedPut struct {
	payloadHash, contentMD5, crc32c, signedHeaders, bodyMD5, bodyCRC32C string
}

func (r *bodyRecorder) Do(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && req.URL.Query().Has("uploads") {
		return r.create(req)
	}
	if req.Method != http.MethodPut || req.Body == nil || req.ContentLength == 0 {
		return r.next.Do(req)
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	req.Body.Close()
	req.Body = io.NopCloser(bytes.NewReader(body))
	sum := md5.Sum(body)
	var crc [4]byte
	binary.BigEndian.PutUint32(crc[:], crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
	_, signed, _ := strings.Cut(req.Header.Get("Authorization"), "SignedHeaders=")
	signed, _, _ = strings.Cut(signed, ",")
	r.mu.Lock()
	r.puts = append(r.puts, recordedPut{
		payloadHash: req.Header.Get("X-Amz-Content-Sha256"), contentMD5: req.Header.Get("Content-MD5"),
		crc32c: req.Header.Get("X-Amz-Checksum-Crc32c"), signedHeaders: signed,
		bodyMD5: base64.StdEncoding.EncodeToString(sum[:]), bodyCRC32C: base64.StdEncoding.EncodeToString(crc[:]),
	})
	r.mu.Unlock()
	return r.next.Do(req)
}

// create handles CreateMultipartUpload as the server it plays.
func (r *bodyRecorder) create(req *http.Request) (*http.Response, error) {
	if req.Header.Get("X-Amz-Checksum-Algorithm") == "" {
		return r.next.Do(req)
	}
	r.mu.Lock()
	r.createsWithAlgorithm++
	r.mu.Unlock()
	if r.refuseAlgorithm {
		body := `<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidArgument</Code><Message>unsupported header x-amz-checksum-algorithm</Message></Error>`
		return &http.Response{StatusCode: http.StatusBadRequest, Status: "400 Bad Request", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": {"application/xml"}}, Body: io.NopCloser(strings.NewReader(body)),
			ContentLength: int64(len(body)), Request: req}, nil
	}
	resp, err := r.next.Do(req)
	if err == nil && r.ignoreAlgorithm {
		resp.Header.Del("X-Amz-Checksum-Algorithm")
		resp.Header.Del("X-Amz-Checksum-Type")
	}
	return resp, err
}

// TestServerUnsignedPayloadWithContentMD5: over plain http, PutObject and UploadPart are sent
// with X-Amz-Content-Sha256: UNSIGNED-PAYLOAD (no SHA-256 of the body on either side) and
// always with the body's Content-MD5, which the signature covers and the server checks
// (TestServerVerifiesContentMD5) — never CRC32C, which anyone on the path could match with
// another body; the objects read back intact.
func TestServerUnsignedPayloadWithContentMD5(t *testing.T) {
	t.Parallel()
	rec, _ := uploadThreeAndOne(t, &bodyRecorder{}, false)
	checkContentMD5Only(t, rec)
	if rec.createsWithAlgorithm != 0 {
		t.Errorf("%d CreateMultipartUpload requests asked for CRC32C over http, want none", rec.createsWithAlgorithm)
	}
}

// TestServerTLSPartsCarryCRC32C: over https, against a server that takes CRC32C (versitygw),
// the parts carry their CRC32C instead of Content-MD5 (signed, checked by the server:
// TestServerVerifiesPartCRC32C), the single PutObject Content-MD5; the objects read back
// intact.
func TestServerTLSPartsCarryCRC32C(t *testing.T) {
	t.Parallel()
	rec, _ := uploadThreeAndOne(t, &bodyRecorder{}, true)
	for i, p := range rec.puts {
		checkUnsignedPayload(t, i, p)
		header, ok := "x-amz-checksum-crc32c", p.crc32c != "" && p.crc32c == p.bodyCRC32C && p.contentMD5 == ""
		if i == len(rec.puts)-1 { // the PutObject
			header, ok = "content-md5", p.contentMD5 != "" && p.contentMD5 == p.bodyMD5 && p.crc32c == ""
		}
		if !ok {
			t.Errorf("PUT %d: Content-MD5 %q, x-amz-checksum-crc32c %q; the body's MD5 %q, CRC32C %q; want only %s",
				i, p.contentMD5, p.crc32c, p.bodyMD5, p.bodyCRC32C, header)
		}
		if !strings.Contains(";"+p.signedHeaders+";", ";"+header+";") {
			t.Errorf("PUT %d: the signature does not cover %s (SignedHeaders=%s)", i, header, p.signedHeaders)
		}
	}
}

// TestServerWithoutFlexibleChecksumsGetsContentMD5: over https, a server that ignores
// x-amz-checksum-algorithm, and one that refuses it, get every part with Content-MD5, the
// uploads succeed, and the store asks once only.
func TestServerWithoutFlexibleChecksumsGetsContentMD5(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rec  *bodyRecorder
	}{
		{"ignores the header", &bodyRecorder{ignoreAlgorithm: true}},
		{"refuses the header", &bodyRecorder{refuseAlgorithm: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec, srv := uploadThreeAndOne(t, tc.rec, true, "second")
			// The upload made with the header and not confirmed was aborted.
			left, err := srv.Client().ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: &srv.Bucket})
			if err != nil {
				t.Fatal(err)
			}
			if len(left.Uploads) != 0 {
				t.Errorf("%d multipart uploads left behind, want none", len(left.Uploads))
			}
			checkContentMD5Only(t, rec)
			if rec.createsWithAlgorithm != 1 {
				t.Errorf("%d CreateMultipartUpload requests asked for CRC32C, want 1 (the store remembers the answer)", rec.createsWithAlgorithm)
			}
		})
	}
}

// uploadThreeAndOne writes an object of three parts (5 MiB parts) and one of a single
// PutObject through a store whose HTTP client is rec (over https when tls), plus, for each of more, another object
// of three parts; it checks that each reads back intact and returns rec with the PUTs of the
// first two objects, the PutObject last, and the server.
func uploadThreeAndOne(t *testing.T, rec *bodyRecorder, tls bool, more ...string) (*bodyRecorder, *s3test.Server) {
	t.Helper()
	start := s3test.Start
	if tls {
		start = s3test.StartTLS
	}
	srv := start(t)
	cfg := srv.Config("payload")
	cfg.PartSize = objectstore.MinS3PartSize
	st, err := objectstore.NewS3WithHTTPClient(context.Background(), cfg, func(c s3.HTTPClient) s3.HTTPClient {
		rec.next = c
		return rec
	})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	large := make([]byte, 2*objectstore.MinS3PartSize+12345) // three parts
	for i := range large {
		large[i] = byte(rng.Uint32())
	}
	put := func(key string, data []byte) {
		up, err := st.Create(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := up.Write(data); err != nil {
			t.Fatal(err)
		}
		if _, err := up.Commit(); err != nil {
			t.Fatalf("commit %s: %v", key, err)
		}
		if got := get(t, st, key); !bytes.Equal(got, data) {
			t.Fatalf("%s read back differs", key)
		}
	}
	put("large", large)
	put("small", []byte("one PutObject"))
	rec.mu.Lock()
	if len(rec.puts) != 4 {
		t.Fatalf("%d PUT requests with a body, want 4 (3 parts and 1 PutObject)", len(rec.puts))
	}
	first := rec.puts
	rec.mu.Unlock()
	for _, key := range more {
		put(key, large)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if want := 4 + 3*len(more); len(rec.puts) != want {
		t.Fatalf("%d PUT requests with a body, want %d", len(rec.puts), want)
	}
	rec.puts = append(rec.puts[4:], first...) // the later objects' parts first, the PutObject last
	return rec, srv
}

// checkContentMD5Only checks that every recorded PUT was sent with an unsigned payload and the
// body's Content-MD5, covered by the signature, and no CRC32C.
func checkContentMD5Only(t *testing.T, rec *bodyRecorder) {
	t.Helper()
	for i, p := range rec.puts {
		checkUnsignedPayload(t, i, p)
		if p.contentMD5 == "" || p.contentMD5 != p.bodyMD5 || p.crc32c != "" {
			t.Errorf("PUT %d: Content-MD5 %q (the body's %q), x-amz-checksum-crc32c %q: want Content-MD5 only", i, p.contentMD5, p.bodyMD5, p.crc32c)
		}
		if !strings.Contains(";"+p.signedHeaders+";", ";content-md5;") {
			t.Errorf("PUT %d: the signature does not cover Content-MD5 (SignedHeaders=%s)", i, p.signedHeaders)
		}
	}
}

// checkUnsignedPayload checks that PUT i was sent with an unsigned payload.
func checkUnsignedPayload(t *testing.T, i int, p recordedPut) {
	t.Helper()
	if p.payloadHash != "UNSIGNED-PAYLOAD" {
		t.Errorf("PUT %d: X-Amz-Content-Sha256 %q, want UNSIGNED-PAYLOAD", i, p.payloadHash)
	}
}
