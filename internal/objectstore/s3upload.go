package objectstore

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

var (
	errUploadAborted = errors.New("upload aborted")
	errUploadDone    = errors.New("upload already committed or aborted")
)

// s3Upload is a streamed object: a single PutObject when it fits in one part, else a
// multipart upload started when the first part is full.
//
// Write runs on the caller's goroutine; each part is sent by its own goroutine. At most
// concurrency+1 buffers exist: one being filled, the others in flight or free. Any failure
// (a part, the context, Abort) cancels the parts in flight and aborts the multipart upload
// once they have ended (teardown); Commit and Abort wait for that.
type s3Upload struct {
	s      *s3Store
	key    string          // relative
	full   string          // with the store's prefix
	parent context.Context // the caller's
	ctx    context.Context // parent, also cancelled at the first failure
	cancel context.CancelFunc
	stop   func() bool // stops the context watcher

	buf       []byte // being filled
	allocated int    // buffers made so far
	free      chan []byte
	nextPart  int   // number of the part buf will be
	size      int64 // bytes written
	inflight  sync.WaitGroup
	closed    bool // Commit or Abort called

	mu         sync.Mutex
	uploadID   string
	crc32c     bool // the server took CRC32C for this upload's parts (see createMultipart)
	parts      []types.CompletedPart
	err        error         // first failure
	failed     chan struct{} // closed at the first failure
	completing bool          // Commit is completing; it tears down itself on failure

	teardownOnce sync.Once
	teardownDone chan struct{}
	teardownErr  error
}

func newS3Upload(ctx context.Context, s *s3Store, key string) *s3Upload {
	u := &s3Upload{
		s:            s,
		key:          key,
		full:         s.fullKey(key),
		free:         make(chan []byte, s.concurrency+1),
		nextPart:     1,
		failed:       make(chan struct{}),
		teardownDone: make(chan struct{}),
	}
	u.parent = ctx
	u.ctx, u.cancel = context.WithCancel(ctx)
	// A cancelled context aborts the upload even if the caller never calls Abort.
	u.stop = context.AfterFunc(ctx, func() {
		u.fail(fmt.Errorf("%s: upload %s: %w", s.Describe(), key, context.Cause(ctx)))
	})
	return u
}

// Write buffers p and sends every full part.
func (u *s3Upload) Write(p []byte) (int, error) {
	if u.closed {
		return 0, errUploadDone
	}
	if err := u.failure(); err != nil {
		return 0, err
	}
	if err := u.cancelled(); err != nil {
		return 0, err
	}
	written := 0
	for len(p) > 0 {
		limit := u.s.parts.size(u.nextPart)
		if int64(len(u.buf)) == limit {
			// Full, and more is coming: this is not the last part.
			if err := u.sendPart(false); err != nil {
				return written, err
			}
			continue
		}
		if u.buf == nil {
			// The first buffer grows with the data, so that a small object costs little.
			u.allocated++
			u.buf = make([]byte, 0, min(limit, 64<<10))
		}
		room := int(limit) - len(u.buf)
		chunk := p[:min(room, len(p))]
		if len(u.buf)+len(chunk) > cap(u.buf) {
			grown := make([]byte, len(u.buf), min(limit, max(2*int64(cap(u.buf)), int64(len(u.buf)+len(chunk)))))
			copy(grown, u.buf)
			u.buf = grown
		}
		u.buf = append(u.buf, chunk...)
		p = p[len(chunk):]
		written += len(chunk)
		u.size += int64(len(chunk))
	}
	return written, nil
}

// sendPart hands the full buffer to a goroutine that uploads it as part u.nextPart, after
// getting the next buffer (which bounds the parts in flight to concurrency). For the last
// part there is no next buffer, but it waits the same way.
func (u *s3Upload) sendPart(last bool) error {
	if !last && u.nextPart >= u.s.parts.maxParts {
		// Part maxParts is full and more data follows.
		err := fmt.Errorf("the object is larger than %d bytes, the most %d parts starting at %d bytes can hold: raise the part size",
			u.s.parts.maxObject(), u.s.parts.maxParts, u.s.parts.base)
		u.fail(fmt.Errorf("%s: upload %s: %w", u.s.Describe(), u.key, err))
		return u.failure()
	}
	if u.uploadID == "" {
		if err := u.createMultipart(); err != nil {
			return err
		}
	}
	var next []byte
	if !last || u.allocated == u.s.concurrency+1 {
		size := u.s.parts.size(u.nextPart + 1)
		if last {
			size = 0 // only waiting for a free one
		}
		b, err := u.nextBuffer(size)
		if err != nil {
			return err
		}
		if last {
			u.free <- b
		} else {
			next = b
		}
	}
	if err := u.cancelled(); err != nil {
		if next != nil {
			u.free <- next
		}
		return err
	}
	u.mu.Lock()
	if u.err != nil {
		u.mu.Unlock()
		if next != nil {
			u.free <- next
		}
		return u.err
	}
	u.inflight.Add(1) // under mu: teardown waits only after u.err is set
	u.mu.Unlock()
	go u.uploadPart(int32(u.nextPart), u.buf)
	u.buf = next
	u.nextPart++
	return nil
}

// createMultipart starts the multipart upload. The request is not cancelled with the upload:
// a request cancelled in flight may still create the upload on the server, and only its ID
// lets the teardown abort it. So the request runs on a goroutine the teardown waits for
// (bounded by createTimeout), and the caller stops waiting at the first failure.
func (u *s3Upload) createMultipart() error {
	u.mu.Lock()
	if u.err != nil {
		u.mu.Unlock()
		return u.err
	}
	u.inflight.Add(1) // under mu: teardown waits only after u.err is set
	u.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		defer u.inflight.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(u.ctx), createTimeout)
		defer cancel()
		id, crc, err := u.s.createMultipart(ctx, u.full)
		if err == nil {
			u.mu.Lock()
			u.uploadID, u.crc32c = id, crc
			u.mu.Unlock()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			u.fail(u.s.classify(u.parent, "upload "+u.key, err))
			return u.failure()
		}
		return nil
	case <-u.failed:
		return u.failure()
	}
}

// createTimeout bounds a CreateMultipartUpload request, which is not cancelled with the upload.
const createTimeout = time.Minute

// nextBuffer returns an empty buffer for a part of size bytes: a new one while fewer than
// concurrency+1 exist, else one given back by a finished part.
func (u *s3Upload) nextBuffer(size int64) ([]byte, error) {
	if u.allocated < u.s.concurrency+1 {
		u.allocated++
		return make([]byte, 0, size), nil
	}
	select {
	case b := <-u.free:
		if int64(cap(b)) < size {
			b = make([]byte, 0, size) // parts grew; the old buffer is garbage
		}
		return b[:0], nil
	case <-u.failed:
		return nil, u.failure()
	}
}

// uploadPart sends part n. The server checks what it receives against a checksum of the
// part: CRC32C when it took that algorithm for the upload, else Content-MD5 (see
// createMultipart).
func (u *s3Upload) uploadPart(n int32, b []byte) {
	defer u.inflight.Done()
	in := &s3.UploadPartInput{
		Bucket:        &u.s.bucket,
		Key:           &u.full,
		UploadId:      &u.uploadID,
		PartNumber:    aws.Int32(n),
		Body:          bytes.NewReader(b),
		ContentLength: aws.Int64(int64(len(b))),
	}
	if u.crc32c {
		in.ChecksumCRC32C = aws.String(crc32cBase64(b))
	} else {
		sum := md5.Sum(b)
		in.ContentMD5 = aws.String(base64.StdEncoding.EncodeToString(sum[:]))
	}
	out, err := u.s.client.UploadPart(u.ctx, in, withUnsignedPayload)
	u.free <- b[:0] // never blocks: the channel holds every buffer
	if err != nil {
		u.fail(u.s.classify(u.parent, fmt.Sprintf("upload %s part %d", u.key, n), err))
		return
	}
	part := types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(n)}
	if u.crc32c {
		part.ChecksumCRC32C = in.ChecksumCRC32C
	}
	u.mu.Lock()
	u.parts = append(u.parts, part)
	u.mu.Unlock()
}

// cancelled records a done caller's context as the failure, as the context watcher does, but
// at once: the watcher runs on a goroutine of its own and may come after a Write that should
// have failed (a cancel while CreateMultipartUpload is answered, on a loaded machine).
func (u *s3Upload) cancelled() error {
	if u.parent.Err() == nil {
		return nil
	}
	u.fail(fmt.Errorf("%s: upload %s: %w", u.s.Describe(), u.key, context.Cause(u.parent)))
	return u.failure()
}

// failure is the first failure, or nil.
func (u *s3Upload) failure() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.err
}

// fail records the first failure, cancels the parts in flight and starts the teardown
// (unless Commit is completing, which then tears down itself).
func (u *s3Upload) fail(err error) {
	u.mu.Lock()
	first := u.err == nil
	if first {
		u.err = err
		close(u.failed)
	}
	completing := u.completing
	u.mu.Unlock()
	if first {
		u.cancel()
		if !completing {
			go u.teardown()
		}
	}
}

// teardown waits for the parts in flight and aborts the multipart upload, once; it runs on a
// context of its own, since the upload's may be cancelled.
func (u *s3Upload) teardown() {
	u.teardownOnce.Do(func() {
		defer close(u.teardownDone)
		u.inflight.Wait()
		u.mu.Lock()
		id := u.uploadID
		u.mu.Unlock()
		if id == "" {
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(u.ctx), 2*time.Minute)
		defer cancel()
		if err := u.abortMultipart(ctx, id); err != nil {
			u.teardownErr = u.s.classify(ctx, "abort the multipart upload of "+u.key+
				" (parts are left behind; a lifecycle rule AbortIncompleteMultipartUpload removes them)", err)
		}
	})
}

// abortMultipart aborts the upload until the server no longer lists it. A part whose request
// was cancelled may still be in the server's hands and land after the first abort (S3's
// documentation says to abort again in that case); ListParts tells whether it did.
func (u *s3Upload) abortMultipart(ctx context.Context, id string) error {
	for attempt := 1; ; attempt++ {
		_, err := u.s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
			Bucket:   &u.s.bucket,
			Key:      &u.full,
			UploadId: &id,
		})
		if err != nil && !s3IsNoSuchUpload(err) {
			return err
		}
		_, err = u.s.client.ListParts(ctx, &s3.ListPartsInput{
			Bucket:   &u.s.bucket,
			Key:      &u.full,
			UploadId: &id,
		})
		if err != nil {
			if s3IsNoSuchUpload(err) {
				return nil
			}
			return err
		}
		if attempt == abortAttempts {
			return fmt.Errorf("the upload %s is still listed after %d aborts", id, abortAttempts)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
}

// abortAttempts bounds the aborts of one multipart upload.
const abortAttempts = 5

// s3IsNoSuchUpload: the upload does not exist (any more). Only some operations model the
// error as a type; the others carry its code.
func s3IsNoSuchUpload(err error) bool {
	var nsu *types.NoSuchUpload
	var apiErr smithy.APIError
	return errors.As(err, &nsu) || errors.As(err, &apiErr) && apiErr.ErrorCode() == "NoSuchUpload"
}

// Abort discards the object: parts in flight are cancelled and the multipart upload is
// aborted. It returns an error only when the abort request itself failed.
func (u *s3Upload) Abort() error {
	if u.closed {
		return errUploadDone
	}
	u.closed = true
	u.stop()
	u.fail(fmt.Errorf("%s: upload %s: %w", u.s.Describe(), u.key, errUploadAborted))
	<-u.teardownDone
	return u.teardownErr
}

// Commit sends what is buffered and makes the object visible: one PutObject for an object
// that fits in one part, else the last part and CompleteMultipartUpload. On failure nothing
// is left behind.
func (u *s3Upload) Commit() (ObjectInfo, error) {
	if u.closed {
		return ObjectInfo{}, errUploadDone
	}
	u.closed = true
	defer u.cancel()
	info, err := u.commit()
	u.stop()
	if err != nil {
		u.fail(err)
		go u.teardown() // no-op when fail already started it
		<-u.teardownDone
		return ObjectInfo{}, u.failure()
	}
	return info, nil
}

func (u *s3Upload) commit() (ObjectInfo, error) {
	if err := u.failure(); err != nil {
		return ObjectInfo{}, err
	}
	if u.uploadID == "" {
		sum := md5.Sum(u.buf)
		_, err := u.s.client.PutObject(u.ctx, &s3.PutObjectInput{
			Bucket:        &u.s.bucket,
			Key:           &u.full,
			Body:          bytes.NewReader(u.buf),
			ContentLength: aws.Int64(int64(len(u.buf))),
			ContentMD5:    aws.String(base64.StdEncoding.EncodeToString(sum[:])),
		}, withUnsignedPayload)
		if err != nil {
			return ObjectInfo{}, u.s.classify(u.parent, "upload "+u.key, err)
		}
		u.buf = nil
		return u.verify()
	}
	// The last part (never empty: a full buffer is sent only when more data follows).
	if err := u.sendPart(true); err != nil {
		return ObjectInfo{}, err
	}
	u.buf = nil
	u.inflight.Wait()
	u.mu.Lock()
	if u.err != nil {
		u.mu.Unlock()
		return ObjectInfo{}, u.err
	}
	u.completing = true
	parts := slices.Clone(u.parts)
	u.mu.Unlock()
	slices.SortFunc(parts, func(a, b types.CompletedPart) int { return int(aws.ToInt32(a.PartNumber) - aws.ToInt32(b.PartNumber)) })
	_, err := u.s.client.CompleteMultipartUpload(u.ctx, &s3.CompleteMultipartUploadInput{
		Bucket:          &u.s.bucket,
		Key:             &u.full,
		UploadId:        &u.uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	})
	if err != nil {
		return ObjectInfo{}, u.s.classify(u.parent, "complete the upload of "+u.key, err)
	}
	return u.verify()
}

// verify reads back the object's size and time; a size other than what was written means
// the server stored something else, and the object is deleted.
//
// It runs on a context of its own: the object exists already, and a cancelled caller must not
// make a successful upload look failed.
func (u *s3Upload) verify() (ObjectInfo, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(u.ctx), time.Minute)
	defer cancel()
	info, err := u.s.Stat(ctx, u.key)
	if err != nil {
		// Uploaded and acknowledged; only the read-back failed.
		return ObjectInfo{Key: u.key, Size: u.size, Modified: time.Now()}, nil
	}
	if info.Size != u.size {
		derr := u.s.Delete(ctx, u.key)
		return ObjectInfo{}, fmt.Errorf("%s: upload %s: the server stored %d bytes, %d were written; the object is deleted (%v): the server mangles uploads, do not use it for backups",
			u.s.Describe(), u.key, info.Size, u.size, derr)
	}
	return info, nil
}
