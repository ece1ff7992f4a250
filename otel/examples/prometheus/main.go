// Command prometheus exports a Locker's metrics to Prometheus through
// OpenTelemetry's Prometheus exporter.
//
// It runs four Lockers (four "processes" on one in-memory store) that take
// turns on one job, and serves the metrics at http://ADDR/metrics:
//
//	go run ./examples/prometheus -addr localhost:9464
//
// With -once it runs the contention once, prints the metrics in
// Prometheus's text format, and exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/redislocker/lock"
	"github.com/redislocker/lock/memorybackend"
	lockotel "github.com/redislocker/lock/otel"
)

func main() {
	addr := flag.String("addr", "localhost:9464", "address to serve /metrics on")
	once := flag.Bool("once", false, "run the contention once, print the metrics and exit")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *addr, *once, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, addr string, once bool, out io.Writer) error {
	// OpenTelemetry's Prometheus exporter is a metric reader that a
	// Prometheus registry gathers from.
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())

	obs, err := lockotel.NewObserver(&lockotel.Options{MeterProvider: mp})
	if err != nil {
		return err
	}
	store, err := memorybackend.NewStore(nil)
	if err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var lockers []*lock.Locker
	for range 4 {
		l, err := lock.New(store.NewBackend(), &lock.Options{Observer: obs, Logger: quiet})
		if err != nil {
			return err
		}
		defer l.Close()
		lockers = append(lockers, l)
	}

	if once {
		if err := contend(ctx, lockers); err != nil {
			return err
		}
		families, err := reg.Gather()
		if err != nil {
			return err
		}
		for _, mf := range families {
			if _, err := expfmt.MetricFamilyToText(out, mf); err != nil {
				return err
			}
		}
		return nil
	}

	srv := &http.Server{Addr: addr, Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
	}()
	go func() {
		for ctx.Err() == nil {
			if err := contend(ctx, lockers); err != nil && ctx.Err() == nil {
				log.Print(err)
			}
		}
	}()
	fmt.Fprintf(out, "serving metrics at http://%s/metrics\n", addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// contend has every Locker run the job five times, one at a time.
func contend(ctx context.Context, lockers []*lock.Locker) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(lockers))
	for _, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				_, err := lock.Do(ctx, l, "nightly-report", 5*time.Second, func(ctx context.Context, _ *lock.Lease) (struct{}, error) {
					time.Sleep(2 * time.Millisecond) // the job
					return struct{}{}, nil
				}, nil)
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}
