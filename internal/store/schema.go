package store

import "strconv"

// The schema: every Redis key and channel sandq owns is built here, and
// nowhere else (a test greps the tree for their literals). With P the
// store's prefix (Config.Prefix, default "sandq"; a hash tag such as
// "{sandq}" on a Redis Cluster, so that a script's keys share a slot):
//
//	key or channel            type     owner (writer)      TTL
//	P:result:<id>             string   producer, worker    ResultTTL (24 h); the job's Result JSON
//	P:status:<id>             string   producer, worker    ResultTTL; the Result's status alone, for counts
//	P:done:<id>               channel  worker, producer    -; a final Result's status, when stored
//	P:cancel                  channel  producer            -; job IDs canceled, for running workers
//	P:cancel:<id>             string   producer            ResultTTL; a cancel request's time
//	P:stream:<id>             stream   worker              StreamTTL after the last write; live output
//	P:langs                   hash     worker              none; language → toolchain version JSON
//	P:libs                    hash     worker              none; library-set volume → size and last use
//	P:envs                    hash     producer            none; "<tenant or @>/<name>" or "*/<name>" (shared) → environment (recipe) JSON
//	P:env-builds              hash     worker              none (the image collector forgets removed images); recipe hash → build (image ID or error, log ≤ 64 KiB, last use)
//	sandq-owner:<owner>       string   worker              30 s, renewed; a worker's pool is alive
//	                                                        (outside P: one engine serves every namespace)
//	P:sess-slots              hash     worker, producer    none; worker → free session slots
//	P:sess-worker:<owner>     string   worker              SessionHeartbeatTTL (6 s), renewed
//	P:sess-cmds:<owner>       list     producer            none (drained by the worker); session commands
//	P:sess-reply:<req>        list     worker              1 min; one command's reply
//	P:session:<id>            string   producer, worker    lifetime + SessionRetention; SessionInfo JSON
//	P:sessions:<tenant>       zset     producer, worker    MaxSessionLifetime + SessionRetention; IDs by creation
//	P:session-cells:<id>      list     worker              MaxSessionLifetime + SessionRetention, renewed; the session's last SessionCellsKept cells (SessionCell JSON, heads only)
//	P:apikey:<hash>           string   operator (api keys) none; an API key's record, by the key's SHA-256
//	P:apikeys                 hash     operator            none; key ID → record, for listing and revoking
//	P:rate:<who>:<unix s>     string   API                 2 s; requests counted in one second
//	P:tenant:<t>:jobs         hash     producer, worker    none; the tenant's jobs not yet final → their held bytes (jobs.Job.HeldBytes)
//	P:tenant:<t>:bytes        string   producer, worker    none; the sum of those bytes
//	P:tenant:<t>:running      set      producer, worker    none; the tenant's jobs released to asynq, not yet final
//	P:tenant:<t>:sessions     set      producer, worker    none; the tenant's sessions not ended
//	P:tenant-caps             hash     producer            none; tenant → its own cap of released jobs
//	P:tenants                 set      producer, worker    none; tenants with jobs not yet final
//	P:tenants-active          zset     producer            none (pruned past ActiveWindow); tenant → its last admission, ms
//	P:lane:<q>:<t>            list     producer, worker    none; the tenant's jobs held back in queue q, oldest first
//	P:lanes                   set      producer, worker    none; "<q>/<t>" of every lane that holds jobs
//	P:held:<id>               string   producer, worker    ResultTTL; a held job's task payload, until released
//	P:releasing               zset     worker              none; jobs released from a lane, not yet in asynq, by time
//	P:fleet                   hash     worker              none; worker (owner) → its job slots (live while sandq-owner:<owner> is)
//	P:worker-status:<owner>   string   worker              the heartbeat's TTL (30 s), renewed; its pools and recent latency (WorkerStatus JSON)
//	P:batch:<id>              string   API                 ResultTTL; a batch's tenant, time and job IDs
//	P:recent-jobs:<t>         zset     producer            ResultTTL, renewed; the tenant's last RecentJobs jobs: "<id>\t<tenant>\t<lang>" by enqueue ms
//	P:recent-jobs:*           zset     producer            ResultTTL, renewed; every tenant's last RecentAll jobs, the same members
//	P:recent-batches:<t>      zset     API                 ResultTTL, renewed; the tenant's last RecentBatches batches: "<id>\t<tenant>" by creation ms
//	P:recent-batches:*        zset     API                 ResultTTL, renewed; every tenant's last RecentAll batches
//	P:recent-sessions:*       zset     producer            MaxSessionLifetime + SessionRetention, renewed; every tenant's last RecentAll sessions: "<id>\t<tenant>"
//	P:webhook:<id>            string   API                 WebhookTTL (7 d); a job's webhook and delivery
//	P:webhooks                zset     API                 none; job IDs with a delivery due, by time
//	P:webhook-secret          string   API                 none; the open API's webhook secret
//
// asynq keeps its own keys under "asynq:{<queue>}:..." (queues critical,
// default and batch, each prefixed "<QueuePrefix>:" when one is set); sandq
// reaches them only through asynq's API.

// key joins the prefix and parts with ":".
func (s *Store) key(parts ...string) string {
	k := s.prefix
	for _, p := range parts {
		k += ":" + p
	}
	return k
}

// ResultKey is job id's Result.
func (s *Store) ResultKey(id string) string { return s.key("result", id) }

// statusKey is job id's status alone: what progress counts read instead of
// whole Results (up to 1 MiB each).
func (s *Store) statusKey(id string) string { return s.key("status", id) }

// DoneChannel is the channel on which job id's final Result (a small one;
// else its status) is published when it is stored (NoticeResult).
func (s *Store) DoneChannel(id string) string { return s.key("done", id) }

// donePattern matches every done channel, for one subscription per
// process.
func (s *Store) donePattern() string { return s.key("done", "*") }

// CancelChannel is the channel on which canceled job IDs are published.
func (s *Store) CancelChannel() string { return s.key("cancel") }

// CancelKey marks job id as canceled.
func (s *Store) CancelKey(id string) string { return s.key("cancel", id) }

// StreamKey is job id's live output.
func (s *Store) StreamKey(id string) string { return s.key("stream", id) }

// LangsKey is the hash of published toolchain versions.
func (s *Store) LangsKey() string { return s.key("langs") }

// LibsKey is the hash of library set uses.
func (s *Store) LibsKey() string { return s.key("libs") }

// envsKey is the hash of environments (recipes) by scope and name.
func (s *Store) envsKey() string { return s.key("envs") }

// envBuildsKey is the hash of recipe builds by recipe hash.
func (s *Store) envBuildsKey() string { return s.key("env-builds") }

// OwnerKey is the key whose presence says that container owner (one
// worker's pool) is alive. It is outside any prefix: one container engine
// may serve workers of several namespaces on this Redis, and each
// reconciler must spare all of their containers.
func OwnerKey(owner string) string { return "sandq-owner:" + owner }

// SessionSlotsKey is the hash of free session slots per worker.
func (s *Store) SessionSlotsKey() string { return s.key("sess-slots") }

// SessionCellsKey is session id's cell history.
func (s *Store) SessionCellsKey(id string) string { return s.key("session-cells", id) }

// WorkerStatusKey is what worker owner publishes of its pools and latency.
func (s *Store) WorkerStatusKey(owner string) string { return s.key("worker-status", owner) }

// SessionHeartbeatKey is worker owner's session heartbeat.
func (s *Store) SessionHeartbeatKey(owner string) string { return s.key("sess-worker", owner) }

// SessionCommandsKey is worker owner's list of session commands.
func (s *Store) SessionCommandsKey(owner string) string { return s.key("sess-cmds", owner) }

// SessionReplyKey is the list where the reply to request req is pushed.
func (s *Store) SessionReplyKey(req string) string { return s.key("sess-reply", req) }

// SessionKey is session id's record.
func (s *Store) SessionKey(id string) string { return s.key("session", id) }

// SessionsKey is the sorted set of a tenant's session IDs ("_" for the
// anonymous tenant).
func (s *Store) SessionsKey(tenant string) string {
	if tenant == "" {
		tenant = "_"
	}
	return s.key("sessions", tenant)
}

// apiKeyKey is the record of the API key whose SHA-256 is hash.
func (s *Store) apiKeyKey(hash string) string { return s.key("apikey", hash) }

// apiKeysKey is the hash of every API key's record by key ID.
func (s *Store) apiKeysKey() string { return s.key("apikeys") }

// rateKey counts who's requests in the second sec.
func (s *Store) rateKey(who string, sec int64) string {
	return s.key("rate", who, strconv.FormatInt(sec, 10))
}

// tenantSegment is tenant as a key segment: "@" for the anonymous tenant,
// a name no tenant has (tenants are [A-Za-z0-9_.:-]).
func tenantSegment(tenant string) string {
	if tenant == "" {
		return "@"
	}
	return tenant
}

// tenantJobsKey is the hash of tenant's jobs not yet final, with their
// held bytes (jobs.Job.HeldBytes).
func (s *Store) tenantJobsKey(tenant string) string {
	return s.key("tenant", tenantSegment(tenant), "jobs")
}

// tenantBytesKey sums the bytes of tenantJobsKey.
func (s *Store) tenantBytesKey(tenant string) string {
	return s.key("tenant", tenantSegment(tenant), "bytes")
}

// tenantRunningKey is the set of tenant's jobs released to asynq.
func (s *Store) tenantRunningKey(tenant string) string {
	return s.key("tenant", tenantSegment(tenant), "running")
}

// tenantSessionsKey is the set of tenant's sessions not ended.
func (s *Store) tenantSessionsKey(tenant string) string {
	return s.key("tenant", tenantSegment(tenant), "sessions")
}

// tenantsKey is the set of tenants with jobs not yet final.
func (s *Store) tenantsKey() string { return s.key("tenants") }

// lanesKey is the set of lanes that hold jobs, as "<q>/<tenant>".
func (s *Store) lanesKey() string { return s.key("lanes") }

// heldKey is held job id's task payload.
func (s *Store) heldKey(id string) string { return s.key("held", id) }

// releasingKey is the sorted set of jobs released from a lane and not yet
// in asynq.
func (s *Store) releasingKey() string { return s.key("releasing") }

// fleetKey is the hash of workers' job slots.
func (s *Store) fleetKey() string { return s.key("fleet") }

// batchKey is batch id's record.
func (s *Store) batchKey(id string) string { return s.key("batch", id) }

// recentKey is the index of tenant's recent jobs, batches or sessions
// (what: "jobs", "batches", "sessions"); every tenant's when all.
func (s *Store) recentKey(what, tenant string, all bool) string {
	if all {
		return s.key("recent-"+what, "*")
	}
	return s.key("recent-"+what, tenantSegment(tenant))
}

// webhookKey is job id's webhook record.
func (s *Store) webhookKey(id string) string { return s.key("webhook", id) }

// webhooksDueKey is the sorted set of jobs with a webhook delivery due.
func (s *Store) webhooksDueKey() string { return s.key("webhooks") }

// webhookSecretKey is the open API's webhook secret.
func (s *Store) webhookSecretKey() string { return s.key("webhook-secret") }

// schemaLua builds, inside scripts, the keys a script finds from a job or
// a tenant (a script's other keys come in KEYS): the same families as the
// builders above, from the prefix P. On a Redis Cluster P is a hash tag,
// so they share the slot of the script's declared keys.
const schemaLua = `
local function seg(t) if t == '' then return '@' end return t end
local function tkey(P, t, what) return P .. ':tenant:' .. seg(t) .. ':' .. what end
local function tenantcapskey(P) return P .. ':tenant-caps' end
local function tenantskey(P) return P .. ':tenants' end
local function activekey(P) return P .. ':tenants-active' end
local function lanekey(P, q, t) return P .. ':lane:' .. q .. ':' .. seg(t) end
local function lanemember(q, t) return q .. '/' .. t end
local function laneskey(P) return P .. ':lanes' end
local function heldkey(P, id) return P .. ':held:' .. id end
local function releasingkey(P) return P .. ':releasing' end
local function statuskey(P, id) return P .. ':status:' .. id end
local function cancelkey(P, id) return P .. ':cancel:' .. id end
local function recentkey(P, what, t) return P .. ':recent-' .. what .. ':' .. t end
`
