package lockotel_test

import (
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/redislocker/lock"
	lockotel "github.com/redislocker/lock/otel"
)

// BenchmarkObserveStep measures recording one backend step.
func BenchmarkObserveStep(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	obs, err := lockotel.NewObserver(&lockotel.Options{MeterProvider: mp})
	if err != nil {
		b.Fatal(err)
	}
	e := lock.Event{Kind: lock.EventStep, ID: "id", Step: "acquire", Start: time.Now(), Duration: time.Millisecond}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		obs.Observe(e)
	}
}
