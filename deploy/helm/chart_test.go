package helm

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	serializerjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/queuebox/queuebox/bootstrap"
)

// kubeVersion is the cluster the chart is rendered for. Helm's SDK, used as
// a library, assumes v1.20 (a version its command line stamps at build
// time), which the chart refuses.
var kubeVersion = &chartutil.KubeVersion{Version: "v1.33.0", Major: "1", Minor: "33"}

const (
	chartDir   = "queuebox"
	release    = "relay"
	namespace  = "outbox"
	configPath = "/etc/queuebox/queuebox.yaml"
)

// strict decodes YAML into the Kubernetes API types (and the Prometheus
// Operator's), refusing unknown and duplicate fields: a misspelt field in
// a template fails here as the API server would refuse it.
var strict = func() runtime.Decoder {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := monitoringv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return serializerjson.NewSerializerWithOptions(serializerjson.DefaultMetaFactory, s, s, serializerjson.SerializerOptions{Yaml: true, Strict: true})
}()

// object is one rendered object, decoded.
type object struct {
	obj  runtime.Object
	hook string // helm.sh/hook, for the hooks
}

// rendered is a release as `helm install` would send it: every object
// decoded strictly into its type, and the notes.
type rendered struct {
	objects []object
	notes   string
}

// values reads a values file of the chart's ci folder.
func values(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "ci", name))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// with returns v with the dotted key set (maps made as needed).
func with(v map[string]any, key string, value any) map[string]any {
	out, _ := yaml.Marshal(v)
	var c map[string]any
	_ = yaml.Unmarshal(out, &c)
	if c == nil {
		c = map[string]any{}
	}
	m := c
	parts := strings.Split(key, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = value
	return c
}

// render renders the chart as `helm install --dry-run` does on the client
// (the values are checked against values.schema.json first), and decodes
// every object, hooks included.
func render(vals map[string]any) (*rendered, error) { return renderFor(kubeVersion, vals) }

// renderFor renders the chart for a cluster of version kv.
func renderFor(kv *chartutil.KubeVersion, vals map[string]any) (*rendered, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	inst := action.NewInstall(&action.Configuration{})
	inst.ClientOnly, inst.DryRun, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = release, namespace
	inst.KubeVersion = kv
	rel, err := inst.Run(ch, vals)
	if err != nil {
		return nil, err
	}
	r := &rendered{notes: rel.Info.Notes}
	docs := releaseutil.SplitManifests(rel.Manifest)
	keys := make([]string, 0, len(docs))
	for k := range docs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		obj, _, err := strict.Decode([]byte(docs[k]), nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%w\n%s", err, docs[k])
		}
		r.objects = append(r.objects, object{obj: obj})
	}
	for _, h := range rel.Hooks {
		obj, _, err := strict.Decode([]byte(h.Manifest), nil, nil)
		if err != nil {
			return nil, fmt.Errorf("hook %s: %w\n%s", h.Path, err, h.Manifest)
		}
		var events []string
		for _, e := range h.Events {
			events = append(events, string(e))
		}
		r.objects = append(r.objects, object{obj: obj, hook: strings.Join(events, ",")})
	}
	return r, nil
}

func mustRender(t *testing.T, vals map[string]any) *rendered {
	t.Helper()
	r, err := render(vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return r
}

// all returns the objects of type T, hooks (hooks true) or not.
func all[T runtime.Object](r *rendered, hooks bool) []T {
	var out []T
	for _, o := range r.objects {
		if v, ok := o.obj.(T); ok && (o.hook != "") == hooks {
			out = append(out, v)
		}
	}
	return out
}

// one returns the one object of type T (hooks or not), or fails.
func one[T runtime.Object](t *testing.T, r *rendered, hooks bool) T {
	t.Helper()
	got := all[T](r, hooks)
	if len(got) != 1 {
		var zero T
		t.Fatalf("%d objects of type %T (hooks %v), want 1", len(got), zero, hooks)
	}
	return got[0]
}

// kinds lists the rendered objects' kinds, hooks marked.
func kinds(r *rendered) []string {
	var out []string
	for _, o := range r.objects {
		k := fmt.Sprintf("%T", o.obj)
		k = k[strings.LastIndex(k, ".")+1:]
		if o.hook != "" {
			k += " (hook " + o.hook + ")"
		}
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// loadConfig loads a rendered configuration file as `queuebox run` would,
// in the environment the pod's Secret (or a stand-in for a Secret the
// chart does not make) gives it.
func loadConfig(t *testing.T, file string, env map[string]string) *bootstrap.Loaded {
	t.Helper()
	l, err := bootstrap.Parse(configPath, []byte(file), func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	})
	if err != nil {
		t.Fatalf("the rendered configuration does not load as queuebox run loads it:\n%v\n%s", err, file)
	}
	return l
}

func container(t *testing.T, spec corev1.PodSpec) corev1.Container {
	t.Helper()
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	return spec.Containers[0]
}

// Helm's linter finds nothing to warn about, with the least values a user
// gives and with every value changed.
func TestChartLints(t *testing.T) {
	for _, file := range []string{"default-values.yaml", "full-values.yaml"} {
		l := lint.AllWithKubeVersion(chartDir, values(t, file), namespace, kubeVersion)
		for _, m := range l.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("helm lint with %s: %s", file, m)
			}
		}
	}
}

// With the chart's defaults and the least a user gives (destinations,
// routes, the database URL), the release holds the relays' Deployment with
// both probes on the admin listener, a grace period above the drain
// timeout and a non-root, read-only security context; the configuration in
// a ConfigMap that loads as `queuebox run` loads it, with every ${NAME} in
// the Secret; the migrations as a hook Job before install and upgrade; a
// PodDisruptionBudget; a Service; and no ServiceMonitor.
func TestChartDefaults(t *testing.T) {
	r := mustRender(t, values(t, "default-values.yaml"))
	want := []string{
		"ConfigMap", "ConfigMap (hook pre-install,pre-upgrade)", "Deployment", "Job (hook pre-install,pre-upgrade)",
		"PodDisruptionBudget", "Secret", "Secret (hook pre-install,pre-upgrade)", "Service", "ServiceAccount",
	}
	if got := kinds(r); !slices.Equal(got, want) {
		t.Fatalf("the release holds %q, want %q", got, want)
	}
	d := one[*appsv1.Deployment](t, r, false)
	cm := one[*corev1.ConfigMap](t, r, false)
	secret := one[*corev1.Secret](t, r, false)
	pdb := one[*policyv1.PodDisruptionBudget](t, r, false)
	svc := one[*corev1.Service](t, r, false)
	sa := one[*corev1.ServiceAccount](t, r, false)
	job := one[*batchv1.Job](t, r, true)
	jobCM := one[*corev1.ConfigMap](t, r, true)
	jobSecret := one[*corev1.Secret](t, r, true)

	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}
	if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable.IntValue() != 0 || ru.MaxSurge.IntValue() != 1 {
		t.Errorf("rolling update %+v: want a new relay ready before an old one stops (maxUnavailable 0, maxSurge 1)", ru)
	}
	pod := d.Spec.Template.Spec
	c := container(t, pod)
	if c.Image != "localhost/queuebox:dev" || !slices.Equal(c.Args, []string{"run", "--config", configPath}) {
		t.Errorf("image %q, args %q", c.Image, c.Args)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "admin" || c.Ports[0].ContainerPort != 8080 {
		t.Errorf("ports %+v, want admin on 8080", c.Ports)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "admin" {
		t.Errorf("liveness probe %+v, want GET /healthz on the admin port", p)
	}
	wantReady := []string{"/queuebox", "healthcheck", "--config", configPath, "--timeout", "5s"}
	if p := c.ReadinessProbe; p == nil || p.Exec == nil || !slices.Equal(p.Exec.Command, wantReady) || p.TimeoutSeconds != 6 {
		t.Errorf("readiness probe %+v, want %q with a timeout of 6 s", p, wantReady)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g != 30 {
		t.Errorf("termination grace period %v, want 30 s (the 15 s drain and 15 s more)", g)
	}
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v", sc)
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container security context %+v", sc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v", c.Resources)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken || pod.ServiceAccountName != sa.Name {
		t.Errorf("service account %q (automount %v), want %q without a token", pod.ServiceAccountName, pod.AutomountServiceAccountToken, sa.Name)
	}
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].SecretRef == nil || c.EnvFrom[0].SecretRef.Name != secret.Name {
		t.Errorf("environment %+v, want the Secret %s", c.EnvFrom, secret.Name)
	}
	if len(pod.Volumes) != 1 || pod.Volumes[0].ConfigMap == nil || pod.Volumes[0].ConfigMap.Name != cm.Name ||
		len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath+"/queuebox.yaml" != configPath {
		t.Errorf("volumes %+v, mounts %+v", pod.Volumes, c.VolumeMounts)
	}
	if d.Spec.Template.Annotations["checksum/config"] == "" {
		t.Error("no checksum of the configuration: a changed configuration would not roll the relays")
	}

	// The configuration loads, with the Secret's variables, as the relay
	// loads it: the admin listener on every interface, with the token.
	env := map[string]string{}
	for k, v := range secret.Data {
		env[k] = string(v)
	}
	if len(env["QUEUEBOX_ADMIN_TOKEN"]) < 32 {
		t.Errorf("the generated admin token %q is short", env["QUEUEBOX_ADMIN_TOKEN"])
	}
	l := loadConfig(t, cm.Data["queuebox.yaml"], env)
	if l.Admin.Listen != "0.0.0.0:8080" || l.Admin.Token != env["QUEUEBOX_ADMIN_TOKEN"] {
		t.Errorf("admin %+v, want 0.0.0.0:8080 with the Secret's token", l.Admin)
	}
	if l.Database.URL != env["QUEUEBOX_DATABASE_URL"] || l.Shutdown.DrainTimeoutMs != 15000 {
		t.Errorf("database.url %q, drain %d ms", l.Database.URL, l.Shutdown.DrainTimeoutMs)
	}

	// The Service and the budget select the relays, never the Job's pod.
	podLabels := labels.Set(d.Spec.Template.Labels)
	jobLabels := labels.Set(job.Spec.Template.Labels)
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || !sel.Matches(podLabels) || sel.Matches(jobLabels) {
		t.Errorf("budget %+v for pods %v (the Job's %v)", pdb.Spec, podLabels, jobLabels)
	}
	svcSel := labels.SelectorFromSet(svc.Spec.Selector)
	if !svcSel.Matches(podLabels) || svcSel.Matches(jobLabels) || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "admin" {
		t.Errorf("service %+v", svc.Spec)
	}
	if dsel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err != nil || !dsel.Matches(podLabels) {
		t.Errorf("the Deployment's selector %v does not select its pods %v", d.Spec.Selector, podLabels)
	}

	// The migrations: a Job of migrate up, after its own configuration and
	// secret (which exist before the release's do), removed once it
	// succeeded.
	jc := container(t, job.Spec.Template.Spec)
	if !slices.Equal(jc.Args, []string{"migrate", "up", "--config", configPath}) || jc.Image != c.Image {
		t.Errorf("the Job runs %q %q", jc.Image, jc.Args)
	}
	if job.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever || job.Spec.BackoffLimit == nil || *job.Spec.BackoffLimit != 2 {
		t.Errorf("the Job's restart policy %q, backoff limit %v", job.Spec.Template.Spec.RestartPolicy, job.Spec.BackoffLimit)
	}
	if len(jc.EnvFrom) != 1 || jc.EnvFrom[0].SecretRef.Name != jobSecret.Name || job.Spec.Template.Spec.Volumes[0].ConfigMap.Name != jobCM.Name {
		t.Errorf("the Job's environment %+v and volumes %+v, want its own hook Secret and ConfigMap", jc.EnvFrom, job.Spec.Template.Spec.Volumes)
	}
	if jobCM.Data["queuebox.yaml"] != cm.Data["queuebox.yaml"] || string(jobSecret.Data["QUEUEBOX_DATABASE_URL"]) != env["QUEUEBOX_DATABASE_URL"] {
		t.Error("the Job's configuration or database URL differ from the relays'")
	}
	for _, m := range []interface {
		GetAnnotations() map[string]string
		GetName() string
	}{job, jobCM, jobSecret} {
		a := m.GetAnnotations()
		if a["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" {
			t.Errorf("%s: delete policy %q", m.GetName(), a["helm.sh/hook-delete-policy"])
		}
	}
	jw, _ := strconv.Atoi(job.Annotations["helm.sh/hook-weight"])
	for _, m := range []*metav1.ObjectMeta{&jobCM.ObjectMeta, &jobSecret.ObjectMeta} {
		if w, err := strconv.Atoi(m.Annotations["helm.sh/hook-weight"]); err != nil || w >= jw {
			t.Errorf("the Job's weight %d is not after %s's %q: it could start before its configuration exists", jw, m.Name, m.Annotations["helm.sh/hook-weight"])
		}
	}
	if !strings.Contains(r.notes, "port-forward deployment/relay-queuebox 8080:8080") {
		t.Errorf("the notes do not say how to reach the admin page:\n%s", r.notes)
	}
}

// With every value changed: the image by digest, secrets the chart does
// not make (and a migration user of its own), a longer drain, another
// port, the ServiceMonitor with the token, scheduling constraints.
func TestChartOtherValues(t *testing.T) {
	r := mustRender(t, values(t, "full-values.yaml"))
	want := []string{
		"ConfigMap", "ConfigMap (hook pre-install,pre-upgrade)", "Deployment", "Job (hook pre-install,pre-upgrade)",
		"PodDisruptionBudget", "Service", "ServiceAccount", "ServiceMonitor",
	}
	if got := kinds(r); !slices.Equal(got, want) {
		t.Fatalf("the release holds %q, want %q (no Secret: existingSecret)", got, want)
	}
	d := one[*appsv1.Deployment](t, r, false)
	cm := one[*corev1.ConfigMap](t, r, false)
	sm := one[*monitoringv1.ServiceMonitor](t, r, false)
	pdb := one[*policyv1.PodDisruptionBudget](t, r, false)
	svc := one[*corev1.Service](t, r, false)
	job := one[*batchv1.Job](t, r, true)
	pod := d.Spec.Template.Spec
	c := container(t, pod)

	if d.Name != "outbox-relay" || *d.Spec.Replicas != 3 {
		t.Errorf("%s with %d replicas", d.Name, *d.Spec.Replicas)
	}
	if c.Image != "registry.example.com/platform/queuebox@sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image %q (%s)", c.Image, c.ImagePullPolicy)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g != 75 {
		t.Errorf("termination grace period %v, want 75 s (the 60 s drain and 15 s more)", g)
	}
	if c.Ports[0].ContainerPort != 9090 || svc.Spec.Ports[0].Port != 9090 {
		t.Errorf("ports %+v / %+v, want 9090", c.Ports, svc.Spec.Ports)
	}
	wantReady := []string{"/queuebox", "healthcheck", "--config", configPath, "--timeout", "3s"}
	if p := c.ReadinessProbe; !slices.Equal(p.Exec.Command, wantReady) || p.TimeoutSeconds != 4 || p.PeriodSeconds != 5 || p.FailureThreshold != 2 {
		t.Errorf("readiness probe %+v", p)
	}
	if c.EnvFrom[0].SecretRef.Name != "outbox-relay-env" || len(c.Env) != 1 || c.Env[0].Name != "GOMAXPROCS" {
		t.Errorf("environment %+v %+v", c.EnvFrom, c.Env)
	}
	if len(pod.ImagePullSecrets) != 1 || pod.NodeSelector["kubernetes.io/os"] != "linux" || len(pod.Tolerations) != 1 ||
		len(pod.TopologySpreadConstraints) != 1 || d.Spec.Template.Labels["team"] != "payments" || d.Spec.Template.Annotations["example.com/team"] != "payments" {
		t.Errorf("scheduling and metadata: %+v", pod)
	}
	if pdb.Spec.MaxUnavailable.String() != "50%" {
		t.Errorf("budget %v, want 50%%", pdb.Spec.MaxUnavailable)
	}
	if ep := sm.Spec.Endpoints; len(ep) != 1 || ep[0].Port != "admin" || ep[0].Path != "/metrics" || string(ep[0].Interval) != "15s" ||
		ep[0].Authorization == nil || ep[0].Authorization.Credentials.Name != "outbox-relay-env" || ep[0].Authorization.Credentials.Key != "QUEUEBOX_ADMIN_TOKEN" {
		t.Errorf("service monitor endpoints %+v", sm.Spec.Endpoints)
	}
	if sm.Labels["release"] != "prometheus" || !labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(svc.Labels)) {
		t.Errorf("the ServiceMonitor (labels %v, selector %v) does not select the Service (labels %v)", sm.Labels, sm.Spec.Selector, svc.Labels)
	}
	jc := container(t, job.Spec.Template.Spec)
	if jc.EnvFrom[0].SecretRef.Name != "outbox-migrator-env" || *job.Spec.BackoffLimit != 5 || jc.Resources.Requests.Cpu().String() != "50m" {
		t.Errorf("the Job: environment %+v, backoff %d, resources %+v", jc.EnvFrom, *job.Spec.BackoffLimit, jc.Resources)
	}
	l := loadConfig(t, cm.Data["queuebox.yaml"], map[string]string{
		"QUEUEBOX_DATABASE_URL": "postgres://relay@db:5432/app", "QUEUEBOX_ADMIN_TOKEN": "example-token", "ORDERS_TOKEN": "orders-token",
	})
	if l.Admin.Listen != "0.0.0.0:9090" || l.Shutdown.DrainTimeoutMs != 60000 || l.Database.MaxConnections != 20 || l.Log.Level != "debug" {
		t.Errorf("the configuration: admin %+v, drain %d, connections %d, log %+v", l.Admin, l.Shutdown.DrainTimeoutMs, l.Database.MaxConnections, l.Log)
	}

	// The migrations in the relays, or in the user's pipeline: no Job.
	for mode, args := range map[string][]string{
		"relay": {"run", "--config", configPath, "--migrate"},
		"none":  {"run", "--config", configPath},
	} {
		r := mustRender(t, with(values(t, "default-values.yaml"), "migrations.mode", mode))
		if jobs := all[*batchv1.Job](r, true); len(jobs) != 0 || len(all[*corev1.ConfigMap](r, true)) != 0 {
			t.Errorf("migrations.mode %s: %d Jobs, %q", mode, len(jobs), kinds(r))
		}
		if got := container(t, one[*appsv1.Deployment](t, r, false).Spec.Template.Spec).Args; !slices.Equal(got, args) {
			t.Errorf("migrations.mode %s: the relays run %q, want %q", mode, got, args)
		}
	}
}

// Values that would not run are refused when the chart is rendered, each
// with a message that names the value and says what to do; a misspelt or
// unknown value is refused by the chart's schema.
func TestChartRefusesValuesThatWouldNotRun(t *testing.T) {
	base := values(t, "default-values.yaml")
	for _, c := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"the chart's defaults alone", map[string]any{}, "config.destinations is empty"},
		{"no route", with(base, "config.routes", []any{}), "config.routes is empty"},
		{"no database", with(base, "secretEnv", map[string]any{"ORDERS_TOKEN": "x"}), "the relays have no database: set secretEnv.QUEUEBOX_DATABASE_URL"},
		{"an admin listener", with(base, "config.admin", map[string]any{"listen": "127.0.0.1:8080"}), "config.admin: the chart sets the admin listener itself"},
		{"a grace period within the drain", with(base, "terminationGracePeriodSeconds", 15), "terminationGracePeriodSeconds 15 is not above the drain timeout (config.shutdown.drainTimeoutMs, 15 s)"},
		{"a misspelt value", with(base, "replicaCuont", 3), "replicaCuont"},
		{"a misspelt probe setting", with(base, "probes.readiness.timeoutSecond", 3), "timeoutSecond"},
		{"an unknown migration mode", with(base, "migrations.mode", "sometimes"), "migrations"},
		{"a secret name that is no variable", with(base, "secretEnv.ORDERS-TOKEN", "x"), "ORDERS-TOKEN"},
		{"a readiness timeout the check cannot meet", with(base, "probes.readiness.timeoutSeconds", 1), "probes.readiness.timeoutSeconds must be at least 2"},
	} {
		_, err := render(c.vals)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error with %q", c.name, err, c.want)
		}
	}
}

// The decoder the tests trust refuses a misspelt field and an unknown
// kind, as the API server would.
func TestStrictDecodingRefusesMisspeltFields(t *testing.T) {
	for doc, want := range map[string]string{
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: { name: x }\nspec: { replica: 2 }\n":                                                             `unknown field "spec.replica"`,
		"apiVersion: v1\nkind: Pod\nmetadata: { name: x }\nspec: { containers: [{ name: x, image: x, readinesProbe: {} }] }\n":                             `unknown field "spec.containers[0].readinesProbe"`,
		"apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: { name: x }\nspec: { selector: {}, endpoints: [{ port: a, bearer: x }] }\n": `unknown field "spec.endpoints[0].bearer"`,
		"apiVersion: v1\nkind: Podd\nmetadata: { name: x }\n":                                                                                              `no kind "Podd"`,
	} {
		if _, _, err := strict.Decode([]byte(doc), nil, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want %q", doc, err, want)
		}
	}
}

// The chart needs Kubernetes 1.25 (policy/v1 budgets, seccomp profiles in
// the security context), and says so when a cluster is older.
func TestChartRefusesOldKubernetes(t *testing.T) {
	vals := values(t, "default-values.yaml")
	if _, err := renderFor(&chartutil.KubeVersion{Version: "v1.25.0", Major: "1", Minor: "25"}, vals); err != nil {
		t.Errorf("Kubernetes 1.25: %v", err)
	}
	_, err := renderFor(&chartutil.KubeVersion{Version: "v1.24.9", Major: "1", Minor: "24"}, vals)
	if err == nil || !strings.Contains(err.Error(), "chart requires kubeVersion: >=1.25.0-0") {
		t.Errorf("Kubernetes 1.24: %v; want the chart's kubeVersion named", err)
	}
}

// docValuesRE finds the Helm values files in the docs: ```yaml blocks whose
// first line is "# Helm values" (bootstrap's docs test leaves them to this
// one).
var docValuesRE = regexp.MustCompile("(?m)^```yaml[ \t]*\n# Helm values[ \t]*\n((?s:.*?))^```[ \t]*$")

// Every Helm values file in the docs renders, its objects decode strictly,
// and the configuration it makes loads with the Secret it makes; a grace
// period follows the drain timeout it sets.
func TestDocumentedValuesRender(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, f := range append([]string{"../../README.md"}, files...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range docValuesRE.FindAllSubmatchIndex(b, -1) {
			found++
			where := fmt.Sprintf("%s:%d", strings.TrimPrefix(f, "../../"), bytes.Count(b[:m[0]], []byte("\n"))+1)
			var vals map[string]any
			if err := yaml.Unmarshal(b[m[2]:m[3]], &vals); err != nil {
				t.Errorf("%s: the values are not YAML: %v", where, err)
				continue
			}
			r, err := render(vals)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			env := map[string]string{}
			for k, v := range one[*corev1.Secret](t, r, false).Data {
				env[k] = string(v)
			}
			l := loadConfig(t, one[*corev1.ConfigMap](t, r, false).Data["queuebox.yaml"], env)
			drain := (l.Shutdown.DrainTimeoutMs + 999) / 1000
			if g := one[*appsv1.Deployment](t, r, false).Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g != int64(drain+15) {
				t.Errorf("%s: grace period %v, want the %d s drain and 15 s", where, g, drain)
			}
		}
	}
	if found == 0 {
		t.Fatal("no Helm values file in the docs: docs/deploy.md shows one")
	}
}
