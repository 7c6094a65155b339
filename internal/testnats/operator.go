package testnats

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Operator is a server in operator mode (decentralised JWT
// authentication): it trusts one operator, knows that operator's accounts
// through a memory resolver, and admits only a user whose JWT one of those
// accounts signed and who proves it holds the user's seed, which is what a
// .creds file carries.
type Operator struct {
	*Server
	account nkeys.KeyPair // signs the users of the one account (JetStream on)
}

// StartOperator starts an in-process operator-mode server with JetStream,
// shut down when the test ends. It is in-process whatever
// $QUEUEBOX_TEST_NATS_URL says: the test needs the operator's keys.
// Connect, NewStream and Stream log in as a user of its account.
func StartOperator(t testing.TB) *Operator {
	t.Helper()
	op := newKeys(t, nkeys.CreateOperator)
	sys := newKeys(t, nkeys.CreateAccount)
	acc := newKeys(t, nkeys.CreateAccount)
	opPub, sysPub, accPub := publicKey(t, op), publicKey(t, sys), publicKey(t, acc)

	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "qbt-operator"
	oc.SystemAccount = sysPub
	opJWT, err := oc.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	// The server wants the claims as decoded from their JWT.
	if oc, err = jwt.DecodeOperatorClaims(opJWT); err != nil {
		t.Fatal(err)
	}
	resolver := &server.MemAccResolver{}
	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = "SYS"
	ac := jwt.NewAccountClaims(accPub)
	ac.Name = "qbt"
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	for _, c := range []*jwt.AccountClaims{sc, ac} {
		enc, err := c.Encode(op)
		if err != nil {
			t.Fatal(err)
		}
		if err := resolver.Store(c.Subject, enc); err != nil {
			t.Fatal(err)
		}
	}
	o := &Operator{account: acc}
	o.Server = start(t, &server.Options{JetStream: true, StoreDir: t.TempDir(),
		TrustedOperators: []*jwt.OperatorClaims{oc}, AccountResolver: resolver, SystemAccount: sysPub})
	o.conn = []natsgo.Option{natsgo.UserCredentials(o.Creds(t, "qbt-test"))}
	return o
}

// Creds writes a .creds file (the user's JWT and seed) for a new user of
// the server's account, in the test's temporary folder, and returns its
// path.
func (o *Operator) Creds(t testing.TB, user string) string {
	t.Helper()
	return creds(t, o.account, user)
}

// UntrustedCreds writes a well-formed .creds file for a user of an account
// of another operator, which no server of this package trusts.
func UntrustedCreds(t testing.TB, user string) string {
	t.Helper()
	return creds(t, newKeys(t, nkeys.CreateAccount), user)
}

func creds(t testing.TB, account nkeys.KeyPair, user string) string {
	t.Helper()
	u := newKeys(t, nkeys.CreateUser)
	uc := jwt.NewUserClaims(publicKey(t, u))
	uc.Name = user
	enc, err := uc.Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := u.Seed()
	if err != nil {
		t.Fatal(err)
	}
	b, err := jwt.FormatUserConfig(enc, seed)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), user+".creds")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newKeys(t testing.TB, create func() (nkeys.KeyPair, error)) nkeys.KeyPair {
	t.Helper()
	kp, err := create()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func publicKey(t testing.TB, kp nkeys.KeyPair) string {
	t.Helper()
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub
}
