package bootstrap

import (
	"errors"
	"strings"
	"testing"
)

const (
	oldSigningSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	newSigningSecret = "whsec_QkVTdC1rZXktb2YtdGhlLXJvdGF0aW9uIQ=="
)

// withSigning adds signing keys to the orders destination of minimal and
// to an HTTP inbox source.
func withSigning(keys string) string {
	return strings.Replace(minimal, `    headers: { Authorization: "Bearer ${ORDERS_TOKEN}" }`+"\n",
		`    headers: { Authorization: "Bearer ${ORDERS_TOKEN}" }`+"\n"+keys, 1)
}

// signingSecrets lists the secrets of a rotation in order; signingSecret
// alone is a list of one; both together must agree (signingSecrets wins,
// so a signingSecret outside it would silently not be used).
func TestSigningSecretsOfARotation(t *testing.T) {
	e := env(map[string]string{"ORDERS_TOKEN": "x", "NEW_SECRET": newSigningSecret, "OLD_SECRET": oldSigningSecret})
	for _, c := range []struct {
		name, keys string
		want       int
	}{
		{"a list of two", "    signingSecrets: [\"${NEW_SECRET}\", \"${OLD_SECRET}\"]\n", 2},
		{"one key alone, as before", "    signingSecret: " + oldSigningSecret + "\n", 1},
		{"both, the single one among the list", "    signingSecret: " + oldSigningSecret + "\n    signingSecrets: [" + newSigningSecret + ", " + oldSigningSecret + "]\n", 2},
	} {
		l, err := Parse("q.yaml", []byte(withSigning(c.keys)), e)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		keys := l.Compiled.Destinations["orders"].SigningKeys
		if len(keys) != c.want {
			t.Errorf("%s: %d keys, want %d", c.name, len(keys), c.want)
		}
		out, err := l.Effective()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{newSigningSecret, oldSigningSecret} {
			if c.want == 1 && s == newSigningSecret {
				continue // not in this file
			}
			if strings.Contains(string(out), strings.TrimPrefix(s, "whsec_")) {
				t.Errorf("%s: config check prints a secret:\n%s", c.name, out)
			}
			if strings.Contains(l.Secrets.Redact("signed with "+s), s) {
				t.Errorf("%s: the secret is not redacted from logs and errors", c.name)
			}
		}
		if c.want == 2 && !strings.Contains(string(out), "signingSecrets:") {
			t.Errorf("%s: config check leaves signingSecrets out:\n%s", c.name, out)
		}
	}
	l, err := Parse("q.yaml", []byte(withSigning("    signingSecrets: [\"${NEW_SECRET}\", \"${OLD_SECRET}\"]\n")), e)
	if err != nil {
		t.Fatal(err)
	}
	if k := l.Compiled.Destinations["orders"].SigningKeys; string(k[0]) != "BESt-key-of-the-rotation!" {
		t.Errorf("the first key is %q; the new secret, listed first, signs first", k[0])
	}
	for _, c := range []struct {
		name, keys, key, reason string
	}{
		{"both, disagreeing", "    signingSecret: " + oldSigningSecret + "\n    signingSecrets: [" + newSigningSecret + "]\n",
			"destinations.orders.signingSecret", "is not one of signingSecrets, which replaces it"},
		{"an empty list", "    signingSecrets: []\n", "destinations.orders.signingSecrets", "is empty; give one secret or more"},
		{"a secret listed twice", "    signingSecrets: [" + newSigningSecret + ", " + newSigningSecret + "]\n",
			"destinations.orders.signingSecrets[1]", "is the same secret as destinations.orders.signingSecrets[0]"},
		{"a secret without its prefix", "    signingSecrets: [" + newSigningSecret + ", MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]\n",
			"destinations.orders.signingSecrets[1]", "does not start with whsec_"},
	} {
		ps := problems(t, withSigning(c.keys))
		if !hasProblem(ps, c.key, c.reason, 0) {
			t.Errorf("%s: %v", c.name, ps)
		}
		for _, p := range ps {
			if strings.Contains(p.String(), "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") || strings.Contains(p.String(), "QkVTdC1r") {
				t.Errorf("%s: a problem shows a secret: %v", c.name, p)
			}
		}
	}
}

// An HTTP inbox source takes signingSecrets too, under the same rules.
func TestInboxSourceSigningSecrets(t *testing.T) {
	src := minimal + "inbox:\n  sources:\n    hooks:\n      type: http\n      topic: hook.in\n%s"
	l, err := Parse("q.yaml", []byte(strings.Replace(src, "%s", "      signingSecrets: ["+newSigningSecret+", "+oldSigningSecret+"]\n", 1)), env(map[string]string{"ORDERS_TOKEN": "x"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Compiled.Sources["hooks"].SigningKeys) != 2 {
		t.Errorf("keys %d", len(l.Compiled.Sources["hooks"].SigningKeys))
	}
	ps := problems(t, strings.Replace(src, "%s", "      signingSecret: "+oldSigningSecret+"\n      signingSecrets: ["+newSigningSecret+"]\n", 1))
	if !hasProblem(ps, "inbox.sources.hooks.signingSecret", "is not one of signingSecrets", 0) {
		t.Errorf("%v", ps)
	}
	// Beyond loopback a source needs credentials; signingSecrets are.
	open := strings.Replace(src, "%s", "", 1) + "admin: { listen: \"0.0.0.0:8080\", token: t0ken-for-admin }\n"
	if ps := problems(t, open); !hasProblem(ps, "inbox.sources.hooks", "accepts messages from anyone", 0) {
		t.Errorf("%v", ps)
	}
	if _, err := Parse("q.yaml", []byte(strings.Replace(open, "      topic: hook.in\n", "      topic: hook.in\n      signingSecrets: ["+newSigningSecret+"]\n", 1)), env(map[string]string{"ORDERS_TOKEN": "x"})); err != nil {
		t.Errorf("a source with signingSecrets beyond loopback: %v", err)
	}
}

// The commands that only read and replay rows load the file without the
// secrets of the destinations and the inbox sources; run and config check
// still need them, and every tool still needs the database's.
func TestToolsNeedOnlyTheDatabaseSettings(t *testing.T) {
	cfg := withSigning("    signingSecrets: [\"${NEW_SECRET}\"]\n") +
		"inbox:\n  sources:\n    hooks: { type: http, topic: hook.in, token: \"${HOOKS_TOKEN}\" }\n"
	e := env(map[string]string{})
	_, err := Parse("q.yaml", []byte(cfg), e)
	var ce *Error
	if !errors.As(err, &ce) || len(ce.Problems) != 3 {
		t.Fatalf("run's load: %v; want the three unset variables", err)
	}
	l, err := ParseForTools("q.yaml", []byte(cfg), e)
	if err != nil {
		t.Fatalf("a tool's load: %v", err)
	}
	var unset []string
	for _, p := range l.Unset {
		unset = append(unset, p.Key)
	}
	if strings.Join(unset, " ") != "destinations.orders.headers.Authorization destinations.orders.signingSecrets[0] inbox.sources.hooks.token" {
		t.Errorf("unset %v", unset)
	}
	if l.Compiled.Router == nil {
		t.Error("no router: dead list --destination and dead groups need the routes")
	}
	db := strings.Replace(cfg, "postgres://queuebox:pw-s3cret@localhost:5432/app?sslmode=disable", "${DB_URL}", 1)
	if _, err := ParseForTools("q.yaml", []byte(db), e); !errors.As(err, &ce) || !hasProblem(ce.Problems, "database.url", "DB_URL is not set", 0) {
		t.Errorf("a tool without the database's variable: %v", err)
	}
}
