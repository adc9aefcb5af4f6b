package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// maxDeliveriesAdvisory is the server's advisory subject for our consumer.
const maxDeliveriesAdvisory = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + TasksStream + "." + WorkerDurable

type deliveryExceeded struct {
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// subscribeDeadLetters moves tasks that exhausted MaxDeliver to LANCED_DEAD.
// Every node subscribes; the copy is deduplicated by message id and the
// delete of the original tolerates having been done by another node.
func (n *Node) subscribeDeadLetters() (*nats.Subscription, error) {
	return n.nc.Subscribe(maxDeliveriesAdvisory, func(msg *nats.Msg) {
		var adv deliveryExceeded
		if err := json.Unmarshal(msg.Data, &adv); err != nil || adv.StreamSeq == 0 {
			n.log.Warn("undecodable max deliveries advisory", "err", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.deadLetter(ctx, adv)
	})
}

func (n *Node) deadLetter(ctx context.Context, adv deliveryExceeded) {
	raw, err := n.q.tasks.GetMsg(ctx, adv.StreamSeq)
	if err != nil {
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			n.log.Warn("read dead task", "seq", adv.StreamSeq, "err", err)
		}
		return
	}
	t, err := taskFromHeaders(raw.Header, raw.Data)
	if err != nil {
		n.log.Error("dead task without envelope", "seq", adv.StreamSeq, "err", err)
		_ = n.q.tasks.DeleteMsg(ctx, adv.StreamSeq)
		return
	}
	dm := taskMsg(t)
	dm.Subject = deadSubjectPrefix + t.Kind
	dm.Header.Set("Lanced-Deliveries", strconv.FormatUint(adv.Deliveries, 10))
	dm.Header.Set("Lanced-Stream-Seq", strconv.FormatUint(adv.StreamSeq, 10))
	if _, err := n.q.js.PublishMsg(ctx, dm, jetstream.WithMsgID("dead:"+t.Key+":"+strconv.FormatUint(adv.StreamSeq, 10))); err != nil {
		n.log.Error("publish dead letter", "task_id", t.Key, "err", err)
		return // the original stays; the next advisory or an operator moves it
	}
	// Tell the coordinator the task is over, then drop the original.
	if err := n.finish(ctx, t, adv.StreamSeq, Result{}, OutcomeAbandoned, errors.New("max deliveries exhausted")); err != nil {
		n.log.Warn("publish dead task result", "task_id", t.Key, "err", err)
	}
	if err := n.q.tasks.DeleteMsg(ctx, adv.StreamSeq); err != nil {
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			n.log.Warn("delete dead task", "task_id", t.Key, "err", err)
		}
		return // another node moved it
	}
	n.m.deadLetters.Inc()
	n.m.tasks.WithLabelValues(t.Kind, "dead").Inc()
	taskLogger(n.log, t).Error("task dead-lettered", "attempt", adv.Deliveries)
}
