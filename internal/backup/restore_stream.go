package backup

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// maxTrailing bounds what RestoreStream reads after the last zstd frame, looking for the end
// of the stream (where a clone stream reports its outcome).
const maxTrailing = 1 << 20

// RestoreStream extracts a stream written by Stream (zstd-compressed mbstream), read from r
// — a peer's clone, say — into opts.TargetDir with `mbstream -x -C <TargetDir>`, prepares it
// with `mariadb-backup --prepare` and returns the position the prepared data holds, read
// from its binlog info file (see ReadBinlogInfo). TargetDir must be empty or missing.
// opts.Progress is called with the bytes read from r; VerifyFirst is ignored.
//
// r is read to its end (io.EOF), so that a reader that reports a failure at its end (an
// agent.Client clone stream does) is heard. Any failure — a read error of r, a damaged zstd
// frame, mbstream or --prepare failing, no binlog info — leaves TargetDir empty, and the
// error says which it was (a read error is wrapped).
func RestoreStream(ctx context.Context, r io.Reader, opts RestoreOptions) (BinlogInfo, error) {
	tool, err := findTool(opts.Tool, "mariadb-backup")
	if err != nil {
		return BinlogInfo{}, fmt.Errorf("restoring a stream: %w", err)
	}
	mbstream, err := findTool(opts.MBStream, "mbstream")
	if err != nil {
		return BinlogInfo{}, fmt.Errorf("restoring a stream: %w", err)
	}
	target, err := emptyTarget(opts.TargetDir)
	if err != nil {
		return BinlogInfo{}, fmt.Errorf("restoring a stream: %w", err)
	}
	bi, err := restoreStreamInto(ctx, r, opts, tool, mbstream, target)
	if err != nil {
		if cleanErr := emptyDir(target); cleanErr != nil {
			err = errors.Join(err, fmt.Errorf("emptying %s: %w", target, cleanErr))
		}
		return BinlogInfo{}, fmt.Errorf("restoring a stream into %s: %w", target, err)
	}
	return bi, nil
}

func restoreStreamInto(ctx context.Context, r io.Reader, opts RestoreOptions, tool, mbstream, target string) (BinlogInfo, error) {
	var read int64
	src := objectstore.NewDigestReader(r, func(n int64) {
		read += n
		if opts.Progress != nil {
			opts.Progress(read)
		}
	})
	u, err := unpack(ctx, src, mbstream, target)
	if err != nil {
		return BinlogInfo{}, err
	}
	if ctx.Err() == nil && src.Err() == nil && u.copyErr == nil {
		// The decoder stops at the end of the last frame; the stream's outcome comes after.
		n, err := io.Copy(io.Discard, io.LimitReader(src, maxTrailing))
		if err == nil && n > 0 {
			return BinlogInfo{}, fmt.Errorf("the stream has %d bytes after its last zstd frame", n)
		}
	}
	switch {
	case ctx.Err() != nil:
		return BinlogInfo{}, fmt.Errorf("cancelled while extracting the stream: %w", ctx.Err())
	case src.Err() != nil:
		return BinlogInfo{}, fmt.Errorf("reading the stream (%d bytes read): %w", src.Digest.Size(), src.Err())
	case u.copyErr != nil:
		return BinlogInfo{}, exitError(fmt.Sprintf("decoding the stream into mbstream (%d bytes read; the stream is damaged, or mbstream stopped)", src.Digest.Size()), u.copyErr, u.out)
	case u.waitErr != nil:
		return BinlogInfo{}, exitError("mbstream -x", u.waitErr, u.out)
	case src.Digest.Size() == 0:
		return BinlogInfo{}, errors.New("the stream is empty")
	}
	if err := prepare(ctx, tool, target, opts); err != nil {
		return BinlogInfo{}, err
	}
	bi, _, err := ReadBinlogInfo(target)
	return bi, err
}
