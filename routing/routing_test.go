package routing

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestTemplateRender(t *testing.T) {
	agg := "order"
	f := &Fields{ID: "id-1", Topic: "order.created", Key: "cust 42", AggregateType: &agg, Headers: map[string]string{"X-Tenant": "acme"}}
	tpl, err := ParseTemplate("https://h/{{topic}}/{{ key }}?t={{ headers.X-Tenant }}&a={{aggregateType}}&id={{ id }}")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tpl.Render(f, func(i int, v string) (string, error) {
		if strings.Contains(tpl.PrefixOf(i), "?") {
			return url.QueryEscape(v), nil
		}
		return url.PathEscape(v), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "https://h/order.created/cust%2042?t=acme&a=order&id=id-1"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	f.AggregateType = nil
	_, err = tpl.Render(f, nil)
	var me *MissingError
	if !errors.As(err, &me) || !strings.Contains(err.Error(), "aggregate_type is null") {
		t.Errorf("a null aggregate_type: %v", err)
	}
}

func TestTemplateErrors(t *testing.T) {
	for _, bad := range []string{"{{ nope }}", "x/{{ topic", "{{ headers. }}"} {
		if _, err := ParseTemplate(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestTransform(t *testing.T) {
	tr, err := CompileTransform(`{order: .orderId, amount, attempt: $attempt, topic: $topic, tenant: $headers["X-Tenant"]}`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := tr.Run([]byte(`{"orderId":"o1","amount":9.5}`), Vars{Attempt: 2, Topic: "order.created", Headers: map[string]string{"X-Tenant": "acme"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != `{"amount":9.5,"attempt":2,"order":"o1","tenant":"acme","topic":"order.created"}` {
		t.Errorf("got %s", out)
	}
	multi, _ := CompileTransform(`.[]`)
	if _, err := multi.Run([]byte(`[1,2]`), Vars{}); err == nil || !strings.Contains(err.Error(), "more than one") {
		t.Errorf("two outputs: %v", err)
	}
	if _, err := multi.Run([]byte(`[]`), Vars{}); err == nil || !strings.Contains(err.Error(), "no value") {
		t.Errorf("no output: %v", err)
	}
	if _, err := CompileTransform(`{a: $nope}`); err == nil {
		t.Error("an unknown variable compiled")
	}
	if _, err := CompileTransform(`{a: `); err == nil {
		t.Error("a broken program compiled")
	}
}
