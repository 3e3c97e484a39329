package objectstore_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
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
// X-Amz-Content-Sha256 and Content-MD5 headers, the headers its signature covers and the
// MD5 of the body actually sent.
type bodyRecorder struct {
	next s3.HTTPClient
	mu   sync.Mutex
	puts []recordedPut
}

type recordedPut struct {
	payloadHash, contentMD5, signedHeaders, bodyMD5 string
}

func (r *bodyRecorder) Do(req *http.Request) (*http.Response, error) {
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
	_, signed, _ := strings.Cut(req.Header.Get("Authorization"), "SignedHeaders=")
	signed, _, _ = strings.Cut(signed, ",")
	r.mu.Lock()
	r.puts = append(r.puts, recordedPut{
		payloadHash: req.Header.Get("X-Amz-Content-Sha256"), contentMD5: req.Header.Get("Content-MD5"),
		signedHeaders: signed, bodyMD5: base64.StdEncoding.EncodeToString(sum[:]),
	})
	r.mu.Unlock()
	return r.next.Do(req)
}

// TestServerUnsignedPayloadWithContentMD5: over plain http, PutObject and UploadPart are sent
// with X-Amz-Content-Sha256: UNSIGNED-PAYLOAD (no SHA-256 of the body on either side) and
// always with the body's Content-MD5, which the signature covers and the server checks
// (TestServerVerifiesContentMD5); the objects read back intact.
func TestServerUnsignedPayloadWithContentMD5(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	cfg := srv.Config("payload")
	cfg.PartSize = objectstore.MinS3PartSize
	rec := &bodyRecorder{}
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
	small := []byte("one PutObject")
	for key, data := range map[string][]byte{"large": large, "small": small} {
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
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.puts) != 4 {
		t.Fatalf("%d PUT requests with a body, want 4 (3 parts and 1 PutObject)", len(rec.puts))
	}
	for i, p := range rec.puts {
		if p.payloadHash != "UNSIGNED-PAYLOAD" {
			t.Errorf("PUT %d: X-Amz-Content-Sha256 %q, want UNSIGNED-PAYLOAD", i, p.payloadHash)
		}
		if p.contentMD5 == "" || p.contentMD5 != p.bodyMD5 {
			t.Errorf("PUT %d: Content-MD5 %q, the body's MD5 is %q", i, p.contentMD5, p.bodyMD5)
		}
		if !strings.Contains(";"+p.signedHeaders+";", ";content-md5;") {
			t.Errorf("PUT %d: the signature does not cover Content-MD5 (SignedHeaders=%s)", i, p.signedHeaders)
		}
	}
}
