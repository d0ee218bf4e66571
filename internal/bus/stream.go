package bus

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// EnsureStream makes the stream cfg names, or updates it to cfg, with as
// many copies as the fleet's stores keep (cfg.Replicas is set here),
// trying again while the cluster settles, as EnsureKeyValue does.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	var s jetstream.Stream
	err := retryTransient(ctx, func() (err error) {
		if cfg.Replicas, err = fleetReplicas(ctx, js, cfg.Name); err != nil {
			return err
		}
		s, err = js.CreateOrUpdateStream(ctx, cfg)
		return err
	})
	return s, err
}
