package localnode

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// SizedStorageClass is a second class the local node provisions: each volume is an ext4 file
// system of exactly the claim's size, in an image file loop-mounted on the volume's folder, so
// it fills up like a real disk (the chaos suite's disk-full fault) and grows when the claim
// does. Volumes of StorageClass are plain host folders, bounded only by the host's file
// system. Needs root, mkfs.ext4, resize2fs and loop devices.
const SizedStorageClass = "dolphin-local-sized"

// sizedImageAnnotation marks a PV whose folder is the mount point of an image file (the
// annotation's value).
const sizedImageAnnotation = "dolphin.dev/sized-image"

// sizedImage is the image file of the sized volume mounted on dir.
func sizedImage(dir string) string { return dir + ".img" }

// mountSized makes dir the mount point of an ext4 file system of size bytes, in dir's image
// file: created and formatted the first time, mounted again after a restart of the host.
// Idempotent.
func mountSized(dir string, size int64) error {
	if ok, err := isMountPoint(dir); err != nil || ok {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	img := sizedImage(dir)
	if _, err := os.Stat(img); errors.Is(err, fs.ErrNotExist) {
		if err := makeImage(img, size); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if out, err := exec.Command("mount", "-o", "loop", img, dir).CombinedOutput(); err != nil {
		return fmt.Errorf("mounting %s on %s: %w: %s", img, dir, err, strings.TrimSpace(string(out)))
	}
	// A fresh file system holds lost+found; a server's data directory must start empty.
	if err := os.Remove(filepath.Join(dir, "lost+found")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing lost+found from %s: %w", dir, err)
	}
	return nil
}

// makeImage writes a sparse image of size bytes holding an empty ext4 file system without
// reserved blocks (all of it is the volume's).
func makeImage(img string, size int64) error {
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		var out []byte
		if out, err = exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", img).CombinedOutput(); err != nil {
			err = fmt.Errorf("mkfs.ext4 %s: %w: %s", img, err, strings.TrimSpace(string(out)))
		}
	}
	if err != nil {
		_ = os.Remove(img)
		return fmt.Errorf("creating the volume image %s: %w", img, err)
	}
	return nil
}

// growSized grows the image mounted on dir to size bytes and its file system with it, online
// (a smaller size changes nothing: volumes never shrink). Online growth needs
// CAP_SYS_RESOURCE; without it resize2fs fails and the claim keeps its size (the error says
// why).
func growSized(dir string, size int64) error {
	img := sizedImage(dir)
	fi, err := os.Stat(img)
	if err != nil {
		return err
	}
	if fi.Size() < size {
		if err := os.Truncate(img, size); err != nil {
			return fmt.Errorf("growing %s: %w", img, err)
		}
	}
	// The file system is grown whenever asked (a no-op at its size): a grow that failed
	// after the image was enlarged is retried in full.
	dev, err := mountSource(dir)
	if err != nil {
		return err
	}
	for _, cmd := range [][]string{{"losetup", "-c", dev}, {"resize2fs", dev}} {
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(cmd, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// removeSized unmounts the file system on dir (when mounted) and deletes the folder and its
// image.
func removeSized(dir string) error {
	if ok, err := isMountPoint(dir); err != nil {
		return err
	} else if ok {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			return fmt.Errorf("unmounting %s: %w: %s", dir, err, strings.TrimSpace(string(out)))
		}
	}
	return errors.Join(os.RemoveAll(dir), os.Remove(sizedImage(dir)))
}

// UnmountVolumes unmounts every sized volume under the node folder dir (before the folder is
// wiped: a mounted file system cannot be removed).
func UnmountVolumes(dir string) error {
	points, err := mountPointsUnder(volumesDir(dir))
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range points {
		if out, err := exec.Command("umount", p).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("unmounting %s: %w: %s", p, err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}

// isMountPoint reports whether dir is a mount point (in this mount namespace).
func isMountPoint(dir string) (bool, error) {
	points, err := mountPointsUnder(dir)
	if err != nil {
		return false, err
	}
	return len(points) > 0 && points[0] == filepath.Clean(dir), nil
}

// mountSource is the device mounted on dir.
func mountSource(dir string) (string, error) {
	out, err := exec.Command("findmnt", "-n", "-o", "SOURCE", "--mountpoint", dir).Output()
	if err != nil {
		return "", fmt.Errorf("finding the device mounted on %s: %w", dir, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// mountPointsUnder lists the mount points at or below dir, shortest first.
func mountPointsUnder(dir string) ([]string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMountPath(fields[4])
		if p == abs || strings.HasPrefix(p, abs+"/") {
			points = append(points, p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	slices.SortStableFunc(points, func(a, b string) int { return len(a) - len(b) })
	return points, nil
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space, …).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
