// Command etcd-member runs one real etcd member (go.etcd.io/etcd/server/v3/embed) for the
// emulator of the collection's tests: one process per emulated control plane, real raft with
// the other members over loopback, TLS from the cluster's etcd CA. It is a test-only judge;
// nothing here ships in the collection.
//
// It starts the member the way Talos's etcd service does (internal/app/machined/pkg/system/
// services/etcd.go): bootstrap a new cluster (--initial-cluster), restore an uploaded snapshot
// into a new one-member cluster first (--restore-from), or join an existing cluster through its
// members (--join: remove a stale member of the same name, add this one as a learner, promote it
// once it caught up). An existing data directory restarts the member it belongs to.
//
// Then it answers the emulator on stdin/stdout, one JSON object a line: a request
// {"id": N, "op": "...", ...} is answered by {"id": N, "result": {...}} or {"id": N, "error": "..."};
// events it reports unasked carry "event" instead ("ready", "failed"). The
// operations are what machined asks of etcd through clientv3 and its maintenance API, plus the
// key-value calls a test makes in the place of the Kubernetes API server. End of stdin stops
// the member, also while it still waits to join, so that no member outlives the emulator that
// started it. "etcd-member --snapshot-status FILE" prints what etcdutl's "snapshot status" reads of a
// snapshot file and exits.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

type options struct {
	name, dataDir, address    string
	clientPort, peerPort      int
	caFile, certFile, keyFile string
	initialCluster, join      string
	restoreFrom               string
	skipHashCheck             bool
	quotaBackendBytes         int64
}

func (o *options) clientURL() string { return fmt.Sprintf("https://%s:%d", o.address, o.clientPort) }
func (o *options) peerURL() string   { return fmt.Sprintf("https://%s:%d", o.address, o.peerPort) }

type member struct {
	opts *options
	// Requests read from stdin; closed with stdin, as is inputClosed.
	requests    chan request
	inputClosed chan struct{}
	etcd        *embed.Etcd
	tls         *tls.Config
	out         *json.Encoder
	outLock     sync.Mutex
	clients     sync.Map // endpoints joined by "," -> *clientv3.Client
}

func (m *member) emit(message map[string]any) {
	m.outLock.Lock()
	defer m.outLock.Unlock()
	_ = m.out.Encode(message)
}

func (m *member) newClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: m.tls, Logger: zap.NewNop()})
}

// client is a clientv3 client of the given client URLs (this member's own by default), kept for later requests.
func (m *member) client(endpoints []string) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		endpoints = []string{m.opts.clientURL()}
	}
	key := strings.Join(endpoints, ",")
	if cached, ok := m.clients.Load(key); ok {
		return cached.(*clientv3.Client), nil
	}
	created, err := m.newClient(endpoints)
	if err != nil {
		return nil, err
	}
	if existing, loaded := m.clients.LoadOrStore(key, created); loaded {
		_ = created.Close()
		return existing.(*clientv3.Client), nil
	}
	return created, nil
}

func urls(raw ...string) []url.URL {
	parsed := make([]url.URL, 0, len(raw))
	for _, text := range raw {
		u, err := url.Parse(text)
		if err != nil {
			panic(err)
		}
		parsed = append(parsed, *u)
	}
	return parsed
}

func dataDirEmpty(dir string) bool {
	entries, err := os.ReadDir(dir)
	return err != nil || len(entries) == 0
}

// joinCluster adds this member to the cluster as a learner, as Talos's buildInitialCluster does, and returns the
// initial cluster to start with and the learner's ID. Each attempt dials anew, as Talos's does: a kept client would
// wait out gRPC's reconnection backoff after the members it dialled were not up yet.
func (m *member) joinCluster(endpoints []string) (string, uint64, error) {
	client, err := m.newClient(endpoints)
	if err != nil {
		return "", 0, err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(context.Background()), 5*time.Second)
	defer cancel()
	list, err := client.MemberList(ctx)
	if err != nil {
		return "", 0, fmt.Errorf("error getting etcd member list: %w", err)
	}
	for _, existing := range list.Members {
		// Only a member with an empty data directory joins: a member of the same name is this node's old one.
		if existing.Name == m.opts.name {
			if _, err = client.MemberRemove(ctx, existing.ID); err != nil {
				return "", 0, fmt.Errorf("error removing self from the member list: %w", err)
			}
		}
	}
	members, id := list.Members, uint64(0)
	added, err := client.MemberAddAsLearner(ctx, []string{m.opts.peerURL()})
	switch {
	case err == nil:
		members, id = added.Members, added.Member.ID
	case errors.Is(err, rpctypes.ErrPeerURLExist):
		// An add that timed out may have been applied all the same: as Talos does, a learner of this peer URL
		// that never started (no name yet) is this node.
		for _, existing := range list.Members {
			if existing.IsLearner && existing.Name == "" && len(existing.PeerURLs) == 1 && existing.PeerURLs[0] == m.opts.peerURL() {
				id = existing.ID
			}
		}
		if id == 0 {
			return "", 0, fmt.Errorf("member already exists with the same peer URLs %q, but is not a learner: %w", m.opts.peerURL(), err)
		}
	default:
		return "", 0, fmt.Errorf("error adding member: %w", err)
	}
	var initial []string
	for _, existing := range members {
		name := existing.Name
		if existing.ID == id {
			name = m.opts.name
		}
		for _, peer := range existing.PeerURLs {
			initial = append(initial, name+"="+peer)
		}
	}
	return strings.Join(initial, ","), id, nil
}

// promote makes the learner a voting member, asking until etcd agrees, as Talos's etcd service does. Each refusal
// that differs from the one before goes to the log, so that a learner that stays one says why.
func (m *member) promote(endpoints []string, learnerID uint64) {
	started, refused := time.Now(), ""
	for {
		client, err := m.newClient(endpoints)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err = client.MemberPromote(ctx, learnerID)
			cancel()
			_ = client.Close()
			if err == nil {
				fmt.Fprintf(os.Stderr, "etcd-member: promoted the learner %x after %s\n", learnerID, time.Since(started).Round(time.Millisecond))
				return
			}
		}
		if err.Error() != refused {
			refused = err.Error()
			fmt.Fprintf(os.Stderr, "etcd-member: waiting to promote the learner %x: %v\n", learnerID, err)
		}
		// etcd refuses to promote a learner that has not caught up with the leader yet.
		time.Sleep(100 * time.Millisecond)
	}
}

func (m *member) start() error {
	o := m.opts
	cfg := embed.NewConfig()
	cfg.Name = o.name
	cfg.Dir = o.dataDir
	cfg.LogLevel = "warn"
	cfg.ListenClientUrls = urls(o.clientURL())
	cfg.AdvertiseClientUrls = urls(o.clientURL())
	cfg.ListenPeerUrls = urls(o.peerURL())
	cfg.AdvertisePeerUrls = urls(o.peerURL())
	// Talos's control planes serve clients and peers with the peer certificate, and require client certificates.
	info := transport.TLSInfo{CertFile: o.certFile, KeyFile: o.keyFile, TrustedCAFile: o.caFile, ClientCertAuth: true}
	cfg.ClientTLSInfo = info
	cfg.PeerTLSInfo = info
	cfg.QuotaBackendBytes = o.quotaBackendBytes

	var joinEndpoints []string
	var learnerID uint64
	switch {
	case !dataDirEmpty(o.dataDir):
		cfg.ClusterState = embed.ClusterStateFlagExisting
	case o.restoreFrom != "":
		if err := restore(o); err != nil {
			return err
		}
		cfg.ClusterState = embed.ClusterStateFlagExisting
	case o.join != "":
		joinEndpoints = strings.Split(o.join, ",")
		var err error
		for {
			cfg.InitialCluster, learnerID, err = m.joinCluster(joinEndpoints)
			if err == nil {
				break
			}
			// Talos retries until the cluster takes the member (or the node goes down).
			fmt.Fprintf(os.Stderr, "etcd-member: waiting to join the cluster: %v\n", err)
			select {
			case <-m.inputClosed:
				os.Exit(0)
			case <-time.After(200 * time.Millisecond):
			}
		}
		cfg.ClusterState = embed.ClusterStateFlagExisting
	default:
		cfg.InitialCluster = o.initialCluster
		cfg.ClusterState = embed.ClusterStateFlagNew
	}

	etcd, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	m.etcd = etcd
	go func() {
		select {
		case <-etcd.Server.ReadyNotify():
			m.emit(map[string]any{"event": "ready", "member_id": uint64(etcd.Server.MemberID())})
			if learnerID != 0 {
				m.promote(joinEndpoints, learnerID)
			}
		case err := <-etcd.Err():
			m.emit(map[string]any{"event": "failed", "error": err.Error()})
		case <-etcd.Server.StopNotify():
			m.emit(map[string]any{"event": "failed", "error": "etcd stopped before it was ready"})
		}
	}()
	return nil
}

// restore writes the snapshot into a new data directory of a one-member cluster, as Talos's recoverFromSnapshot does.
func restore(o *options) error {
	manager := snapshot.NewV3(zap.NewNop())
	if !o.skipHashCheck {
		if _, err := manager.Status(o.restoreFrom); err != nil {
			return fmt.Errorf("error verifying snapshot: %w", err)
		}
	}
	err := manager.Restore(snapshot.RestoreConfig{
		SnapshotPath:   o.restoreFrom,
		Name:           o.name,
		OutputDataDir:  o.dataDir,
		PeerURLs:       []string{o.peerURL()},
		InitialCluster: o.name + "=" + o.peerURL(),
		SkipHashCheck:  o.skipHashCheck,
	})
	if err != nil {
		return fmt.Errorf("error recovering from the snapshot: %w", err)
	}
	return nil
}

type request struct {
	ID        int64    `json:"id"`
	Op        string   `json:"op"`
	Endpoints []string `json:"endpoints"`
	Timeout   float64  `json:"timeout"`
	MemberID  uint64   `json:"member_id"`
	Key       string   `json:"key"`
	Value     string   `json:"value"`
	Path      string   `json:"path"`
	Alarm     string   `json:"alarm"`
	PeerURLs  []string `json:"peer_urls"`
}

func memberJSON(m *pb.Member) map[string]any {
	return map[string]any{"id": m.ID, "name": m.Name, "peer_urls": m.PeerURLs, "client_urls": m.ClientURLs, "is_learner": m.IsLearner}
}

func membersJSON(members []*pb.Member) []map[string]any {
	listed := make([]map[string]any, 0, len(members))
	for _, m := range members {
		listed = append(listed, memberJSON(m))
	}
	return listed
}

func alarmsJSON(alarms []*pb.AlarmMember) []map[string]any {
	listed := make([]map[string]any, 0, len(alarms))
	for _, alarm := range alarms {
		listed = append(listed, map[string]any{"member_id": alarm.MemberID, "alarm": alarm.Alarm.String()})
	}
	return listed
}

func (m *member) handle(req request) (map[string]any, error) {
	timeout := 5 * time.Second
	if req.Timeout > 0 {
		timeout = time.Duration(req.Timeout * float64(time.Second))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	client, err := m.client(req.Endpoints)
	if err != nil {
		return nil, err
	}
	self := m.opts.clientURL()
	switch req.Op {
	case "member_list":
		// Talos asks for a leader on every cluster call (clientv3.WithRequireLeader).
		resp, err := client.MemberList(clientv3.WithRequireLeader(ctx))
		if err != nil {
			return nil, err
		}
		return map[string]any{"members": membersJSON(resp.Members)}, nil
	case "member_add_learner":
		// What a joining node's add leaves behind when it was applied but its caller never heard back.
		resp, err := client.MemberAddAsLearner(clientv3.WithRequireLeader(ctx), req.PeerURLs)
		if err != nil {
			return nil, err
		}
		return map[string]any{"members": membersJSON(resp.Members)}, nil
	case "member_remove":
		resp, err := client.MemberRemove(clientv3.WithRequireLeader(ctx), req.MemberID)
		if err != nil {
			return nil, err
		}
		return map[string]any{"members": membersJSON(resp.Members)}, nil
	case "status":
		resp, err := client.Status(ctx, self)
		if err != nil {
			return nil, err
		}
		return map[string]any{
			"member_id": resp.Header.MemberId, "leader": resp.Leader, "version": resp.Version,
			"storage_version": resp.StorageVersion, "db_size": resp.DbSize, "db_size_in_use": resp.DbSizeInUse,
			"raft_index": resp.RaftIndex, "raft_term": resp.RaftTerm, "raft_applied_index": resp.RaftAppliedIndex,
			"errors": resp.Errors, "is_learner": resp.IsLearner,
		}, nil
	case "move_leader":
		if _, err := client.MoveLeader(ctx, req.MemberID); err != nil {
			return nil, err
		}
		return map[string]any{}, nil
	case "defragment":
		if _, err := client.Defragment(ctx, self); err != nil {
			return nil, err
		}
		return map[string]any{}, nil
	case "alarm_list":
		resp, err := client.AlarmList(ctx)
		if err != nil {
			return nil, err
		}
		return map[string]any{"alarms": alarmsJSON(resp.Alarms)}, nil
	case "alarm_disarm":
		// An empty AlarmMember disarms every alarm (clientv3 lists them first).
		resp, err := client.AlarmDisarm(ctx, &clientv3.AlarmMember{})
		if err != nil {
			return nil, err
		}
		return map[string]any{"alarms": alarmsJSON(resp.Alarms)}, nil
	case "alarm_activate":
		// clientv3 has no call for it; etcd raises alarms itself (NOSPACE when the quota is exceeded).
		alarm := pb.AlarmType(pb.AlarmType_value[req.Alarm])
		_, err := pb.NewMaintenanceClient(client.ActiveConnection()).Alarm(ctx, &pb.AlarmRequest{
			Action: pb.AlarmRequest_ACTIVATE, MemberID: uint64(m.etcd.Server.MemberID()), Alarm: alarm,
		})
		if err != nil {
			return nil, err
		}
		return map[string]any{}, nil
	case "snapshot":
		// The maintenance API's stream: the bbolt database followed by its sha256.
		stream, err := client.Snapshot(ctx)
		if err != nil {
			return nil, err
		}
		defer stream.Close()
		file, err := os.OpenFile(req.Path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, err
		}
		size, err := io.Copy(file, stream)
		if closeErr := file.Close(); err == nil {
			err = closeErr
		}
		if err != nil {
			return nil, err
		}
		return map[string]any{"size": size}, nil
	case "put":
		resp, err := client.Put(ctx, req.Key, req.Value)
		if err != nil {
			return nil, err
		}
		return map[string]any{"revision": resp.Header.Revision}, nil
	case "get":
		resp, err := client.Get(ctx, req.Key)
		if err != nil {
			return nil, err
		}
		if len(resp.Kvs) == 0 {
			return map[string]any{"value": nil}, nil
		}
		return map[string]any{"value": string(resp.Kvs[0].Value)}, nil
	case "delete":
		resp, err := client.Delete(ctx, req.Key, clientv3.WithPrefix())
		if err != nil {
			return nil, err
		}
		return map[string]any{"deleted": resp.Deleted, "revision": resp.Header.Revision}, nil
	case "compact":
		// What the Kubernetes API server does every few minutes: drop the history before the current revision.
		current, err := client.Get(ctx, "compact-probe")
		if err != nil {
			return nil, err
		}
		if _, err := client.Compact(ctx, current.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
			return nil, err
		}
		return map[string]any{"revision": current.Header.Revision}, nil
	}
	return nil, fmt.Errorf("unknown operation %q", req.Op)
}

func (m *member) read(input io.Reader) {
	scanner := bufio.NewScanner(input)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		var req request
		if err := json.Unmarshal(scanner.Bytes(), &req); err != nil {
			m.emit(map[string]any{"event": "bad_request", "error": err.Error()})
			continue
		}
		m.requests <- req
	}
	close(m.requests)
	close(m.inputClosed)
}

// serve answers the requests until stdin ends, each in its own goroutine: a snapshot or a defragmentation does not
// hold up the others.
func (m *member) serve() {
	for req := range m.requests {
		go func() {
			result, err := m.handle(req)
			if err != nil {
				m.emit(map[string]any{"id": req.ID, "error": err.Error()})
			} else {
				m.emit(map[string]any{"id": req.ID, "result": result})
			}
		}()
	}
}

// snapshotStatus prints what etcdutl's "snapshot status" reads of a snapshot file, as JSON: the judge of the
// collection's own snapshot check.
func snapshotStatus(path string) {
	status, err := snapshot.NewV3(zap.NewNop()).Status(path)
	if err != nil {
		_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"error": err.Error()})
		return
	}
	_ = json.NewEncoder(os.Stdout).Encode(map[string]any{
		"revision": status.Revision, "total_keys": status.TotalKey, "total_size": status.TotalSize, "version": status.Version,
	})
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "--snapshot-status" {
		snapshotStatus(os.Args[2])
		return
	}
	o := &options{}
	flags := flag.NewFlagSet("etcd-member", flag.ExitOnError)
	flags.StringVar(&o.name, "name", "", "member name (the node's hostname)")
	flags.StringVar(&o.dataDir, "data-dir", "", "data directory (the node's /var/lib/etcd)")
	flags.StringVar(&o.address, "address", "", "the node's address, where the member listens and what it advertises")
	flags.IntVar(&o.clientPort, "client-port", 2379, "client port")
	flags.IntVar(&o.peerPort, "peer-port", 2380, "peer port")
	flags.StringVar(&o.caFile, "ca", "", "the cluster's etcd CA certificate")
	flags.StringVar(&o.certFile, "cert", "", "the member's certificate (serverAuth and clientAuth), signed by the etcd CA")
	flags.StringVar(&o.keyFile, "key", "", "the member certificate's key")
	flags.StringVar(&o.initialCluster, "initial-cluster", "", "bootstrap a new cluster of these members (name=peer URL,...)")
	flags.StringVar(&o.join, "join", "", "join the cluster whose members serve these client URLs (comma-separated)")
	flags.StringVar(&o.restoreFrom, "restore-from", "", "restore this snapshot into a new one-member cluster first")
	flags.BoolVar(&o.skipHashCheck, "skip-hash-check", false, "restore a snapshot that has no sha256 appended (a copied database)")
	flags.Int64Var(&o.quotaBackendBytes, "quota-backend-bytes", 0, "the database size at which etcd raises NOSPACE (0: etcd's default)")
	_ = flags.Parse(os.Args[1:])
	if o.name == "" || o.dataDir == "" || o.address == "" || o.caFile == "" || o.certFile == "" || o.keyFile == "" {
		fmt.Fprintln(os.Stderr, "etcd-member: --name, --data-dir, --address, --ca, --cert and --key are required")
		os.Exit(2)
	}
	if o.initialCluster == "" && o.join == "" && o.restoreFrom == "" && dataDirEmpty(o.dataDir) {
		fmt.Fprintln(os.Stderr, "etcd-member: an empty data directory needs --initial-cluster, --join or --restore-from")
		os.Exit(2)
	}

	tlsConfig, err := transport.TLSInfo{CertFile: o.certFile, KeyFile: o.keyFile, TrustedCAFile: o.caFile}.ClientConfig()
	if err != nil {
		fmt.Fprintf(os.Stderr, "etcd-member: client TLS: %v\n", err)
		os.Exit(1)
	}
	m := &member{
		opts: o, tls: tlsConfig, out: json.NewEncoder(os.Stdout),
		requests: make(chan request, 64), inputClosed: make(chan struct{}),
	}
	go m.read(os.Stdin)
	if err := m.start(); err != nil {
		m.emit(map[string]any{"event": "failed", "error": err.Error()})
		os.Exit(1)
	}
	m.serve()
	m.etcd.Close()
}
