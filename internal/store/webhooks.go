package store

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Webhooks are delivered by every API process through Redis: the due set
// holds each pending job with the time of its next attempt; a process
// claims an attempt with a script that moves it a lease into the future,
// so exactly one process delivers it, and one that dies mid-attempt leaves
// it to another when the lease ends.

// WebhookStatus is the delivery of a job's webhook.
type WebhookStatus struct {
	URL            string    `json:"url"`
	State          string    `json:"state" enum:"pending,delivered,failed" doc:"pending until delivered or out of attempts"`
	Attempts       int       `json:"attempts"`
	LastStatusCode int       `json:"last_status_code,omitempty"`
	LastError      string    `json:"last_error,omitempty"`
	DeliveredAt    time.Time `json:"delivered_at,omitzero"`
}

// Webhook is a job's stored webhook: where to, for whom, the secret it is
// signed with, and its delivery.
type Webhook struct {
	URL     string        `json:"url"`
	KeyID   string        `json:"key_id"`
	KeyHash string        `json:"key_hash"`
	Tenant  string        `json:"tenant"`
	Secret  string        `json:"secret"`
	Status  WebhookStatus `json:"status"`
}

// ErrNoWebhook: the job has no webhook record (none, or expired).
var ErrNoWebhook = errors.New("store: no webhook")

// PutWebhook records job id's webhook for ttl, its first attempt due at
// due.
func (s *Store) PutWebhook(ctx context.Context, id string, w Webhook, ttl time.Duration, due time.Time) error {
	b, err := json.Marshal(w)
	if err != nil {
		return err
	}
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.webhookKey(id), b, ttl)
		p.ZAdd(ctx, s.webhooksDueKey(), redis.Z{Score: float64(due.UnixMilli()), Member: id})
		return nil
	})
	return err
}

// GetWebhook reads job id's webhook; ErrNoWebhook when it has none.
func (s *Store) GetWebhook(ctx context.Context, id string) (Webhook, error) {
	var w Webhook
	b, err := s.rdb.Get(ctx, s.webhookKey(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return w, ErrNoWebhook
	}
	if err != nil {
		return w, err
	}
	return w, json.Unmarshal(b, &w)
}

// UpdateWebhook stores job id's webhook after an attempt, keeping its TTL:
// due again at next when still pending (next not zero), out of the due set
// otherwise.
func (s *Store) UpdateWebhook(ctx context.Context, id string, w Webhook, next time.Time) error {
	b, err := json.Marshal(w)
	if err != nil {
		return err
	}
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.SetArgs(ctx, s.webhookKey(id), b, redis.SetArgs{KeepTTL: true})
		if !next.IsZero() {
			p.ZAdd(ctx, s.webhooksDueKey(), redis.Z{Score: float64(next.UnixMilli()), Member: id})
		} else {
			p.ZRem(ctx, s.webhooksDueKey(), id)
		}
		return nil
	})
	return err
}

// DueWebhooks returns up to n jobs whose webhook attempt is due now.
func (s *Store) DueWebhooks(ctx context.Context, n int64) ([]string, error) {
	return s.rdb.ZRangeByScore(ctx, s.webhooksDueKey(), &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(time.Now().UnixMilli(), 10), Count: n}).Result()
}

// DelayWebhook makes job id's attempt due again at next.
func (s *Store) DelayWebhook(ctx context.Context, id string, next time.Time) error {
	return s.rdb.ZAdd(ctx, s.webhooksDueKey(), redis.Z{Score: float64(next.UnixMilli()), Member: id}).Err()
}

// DropWebhook removes job id from the due set (its record is gone).
func (s *Store) DropWebhook(ctx context.Context, id string) error {
	return s.rdb.ZRem(ctx, s.webhooksDueKey(), id).Err()
}

// claimWebhookScript moves a pending delivery a lease into the future if
// it is due (ARGV[2]: now, or "+inf" for a first attempt on a poke), so
// that one process makes the attempt.
var claimWebhookScript = redis.NewScript(`
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then return 0 end
if ARGV[2] ~= '+inf' and tonumber(s) > tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
`)

// ClaimWebhook claims job id's attempt until leaseUntil if it is due
// (any time when anyTime: a first attempt on the job's end).
func (s *Store) ClaimWebhook(ctx context.Context, id string, anyTime bool, leaseUntil time.Time) (bool, error) {
	due := strconv.FormatInt(time.Now().UnixMilli(), 10)
	if anyTime {
		due = "+inf"
	}
	ok, err := claimWebhookScript.Run(ctx, s.rdb, []string{s.webhooksDueKey()}, id, due, leaseUntil.UnixMilli()).Int()
	return ok == 1, err
}

// OpenWebhookSecret returns the secret that signs the webhooks of an API
// without keys, making it with newSecret on first use.
func (s *Store) OpenWebhookSecret(ctx context.Context, newSecret func() string) (string, error) {
	_ = s.rdb.SetNX(ctx, s.webhookSecretKey(), newSecret(), 0).Err()
	return s.rdb.Get(ctx, s.webhookSecretKey()).Result()
}
