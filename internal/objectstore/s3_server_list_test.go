package objectstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/objectstore/s3test"
)

// TestServerListPagingAndPrefixes: List follows continuation tokens past the server's
// 1,000 keys per page, returns keys in order and relative to the prefix, and a store never
// sees another prefix's objects (prefix "a" is "a/", not "ab/"). Delete removes them in
// batches of 1,000.
func TestServerListPagingAndPrefixes(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	var reqs objectstore.RequestCounter
	a := newStore(t, srv.Config("a"), objectstore.S3TestOptions{Requests: &reqs})
	ab := newStore(t, srv.Config("ab/"), objectstore.S3TestOptions{})
	b := newStore(t, srv.Config("/b/"), objectstore.S3TestOptions{})
	const keys = 1050
	var wg sync.WaitGroup
	errs := make(chan error, keys)
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				u, err := a.Create(context.Background(), fmt.Sprintf("many/%04d", i))
				if err == nil {
					_, err = u.Write([]byte{byte(i)})
				}
				if err == nil {
					_, err = u.Commit()
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range keys {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	put(t, a, "other/x", []byte("a"))
	put(t, ab, "many/0001", []byte("ab"))
	put(t, b, "many/0002", []byte("b"))

	got, err := a.List(context.Background(), "many/")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != keys {
		t.Fatalf("List(many/) returned %d objects, want %d", len(got), keys)
	}
	for i, o := range got {
		if want := fmt.Sprintf("many/%04d", i); o.Key != want || o.Size != 1 || o.Modified.IsZero() {
			t.Fatalf("List[%d] = %+v, want key %s of 1 byte", i, o, want)
		}
	}
	small := newStore(t, srv.Config("a"), objectstore.S3TestOptions{ListPageSize: 7})
	if got, err := small.List(context.Background(), "many/00"); err != nil || len(got) != 100 {
		t.Fatalf("List with pages of 7: %d objects, %v; want 100", len(got), err)
	}
	if all, err := a.List(context.Background(), ""); err != nil || len(all) != keys+1 || all[keys].Key != "other/x" {
		t.Fatalf("List of store a: %d objects, %v", len(all), err)
	}
	for _, st := range []objectstore.Store{ab, b} {
		all, err := st.List(context.Background(), "")
		if err != nil || len(all) != 1 {
			t.Fatalf("%s: List: %+v, %v; want its one object", st.Describe(), all, err)
		}
	}
	if _, err := a.Stat(context.Background(), "many/0002"); err != nil {
		t.Fatal(err)
	}
	if data := get(t, b, "many/0002"); string(data) != "b" {
		t.Fatalf("store b read %q, want its own object", data)
	}
	if _, err := b.Stat(context.Background(), "many/0003"); !errors.Is(err, objectstore.ErrNotFound) {
		t.Fatalf("store b sees store a's object: %v", err)
	}

	del := make([]string, 0, keys+1)
	for _, o := range got {
		del = append(del, o.Key)
	}
	del = append(del, "never-written")
	if err := a.Delete(context.Background(), del...); err != nil {
		t.Fatal(err)
	}
	if got := reqs.DeleteRequests(); len(got) != 2 || got[0] == "" || got[1] == "" {
		t.Errorf("deleting %d keys sent DeleteObjects with Content-MD5 %q, want 2 requests (1000 + %d keys) with one each", len(del), got, len(del)-1000)
	}
	if left, err := a.List(context.Background(), ""); err != nil || len(left) != 1 || left[0].Key != "other/x" {
		t.Fatalf("after Delete, store a lists %+v, %v; want only other/x", left, err)
	}
	if left, err := ab.List(context.Background(), ""); err != nil || len(left) != 1 {
		t.Fatalf("Delete in store a removed store ab's object: %+v, %v", left, err)
	}
	if err := a.Delete(context.Background()); err != nil {
		t.Fatalf("Delete of nothing: %v", err)
	}
}

// TestServerMissingObject: Stat and Open of a missing key wrap ErrNotFound.
func TestServerMissingObject(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	st := newStore(t, srv.Config("p"), objectstore.S3TestOptions{})
	if err := objectstore.Check(context.Background(), st); err != nil {
		t.Fatalf("Check: %v", err)
	}
	_, err := st.Stat(context.Background(), "nope")
	if !errors.Is(err, objectstore.ErrNotFound) {
		t.Errorf("Stat: %v, want ErrNotFound", err)
	}
	_, err = st.Open(context.Background(), "dir/nope")
	if !errors.Is(err, objectstore.ErrNotFound) {
		t.Errorf("Open: %v, want ErrNotFound", err)
	}
	t.Logf("Open: %v", err)
}
