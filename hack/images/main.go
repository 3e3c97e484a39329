// Command images builds Dolphin's container images without Docker (`make images`): Dolphin's
// image from two static binaries, the local node's pause image, and MariaDB images from
// Debian's packages (bookworm: 10.11, trixie: 11.8), as Docker archives in a cache folder with
// images.json listing them. See internal/imagebuild and docs/design/0046-images-built-here.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dolphin-operator/dolphin/internal/imagebuild"
)

func main() {
	var (
		o       imagebuild.Options
		epoch   = flag.Int64("epoch", 0, "SOURCE_DATE_EPOCH of Dolphin's image (default: $SOURCE_DATE_EPOCH)")
		suites  = flag.String("suites", "bookworm,trixie", "Debian suites whose MariaDB make images (empty: none)")
		mirror  = flag.String("mirror", "", "Debian mirror (default http://deb.debian.org/debian)")
		timeout = flag.Duration("timeout", 20*time.Minute, "give up after this long")
	)
	flag.StringVar(&o.Dir, "dir", "", "cache folder of the images (required)")
	flag.StringVar(&o.Dolphin.Dolphin, "dolphin", "bin/image/dolphin", "static dolphin-pod binary (the image's /dolphin: cmd/dolphin-pod)")
	flag.StringVar(&o.Dolphin.Operator, "operator", "bin/image/dolphin-operator", "static dolphin-operator binary")
	flag.StringVar(&o.PauseBinary, "pause", "bin/image/pause", "static pause binary (hack/pause)")
	flag.StringVar(&o.Dolphin.CACerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA bundle for the image (empty: none)")
	flag.StringVar(&o.Dolphin.Version, "version", "dev", "the image's version label")
	flag.StringVar(&o.Dolphin.Revision, "revision", "", "the source revision label")
	flag.StringVar(&o.Tag, "tag", "dev", "tag of Dolphin's image")
	flag.Parse()
	if o.Dir == "" {
		fmt.Fprintln(os.Stderr, "images: --dir is required")
		os.Exit(2)
	}
	if *epoch == 0 {
		if v, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64); err == nil {
			*epoch = v
		}
	}
	o.Dolphin.Created = time.Unix(*epoch, 0).UTC()
	for _, s := range strings.Split(*suites, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.Suites = append(o.Suites, imagebuild.MariaDBSuite{Name: s, Mirror: *mirror})
		}
	}
	o.Log = os.Stdout
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if _, err := imagebuild.Build(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
	fmt.Println("images: wrote", imagebuild.ManifestPath(o.Dir))
}
