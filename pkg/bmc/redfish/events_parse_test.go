package redfish_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/metalheal/metalheal/pkg/bmc/redfish"
)

// The stream is read as DSP0266 and the HTML Server-Sent Events format have it: data lines joined, a
// blank line to end an event, comments and other fields skipped, every line and every event bounded.
func TestReadEvents(t *testing.T) {
	const limit = 64
	tests := map[string]struct {
		stream  string
		want    []string
		wantErr string // "" means the stream's end (io.EOF)
	}{
		"one event":                        {stream: "id: 1\ndata: {}\n\n", want: []string{"{}"}},
		"data over several lines":          {stream: "data: {\ndata:  \"a\": 1\ndata: }\n\n", want: []string{"{\n \"a\": 1\n}"}},
		"no space after the colon":         {stream: "data:{}\n\n", want: []string{"{}"}},
		"CRLF line ends":                   {stream: "id: 1\r\ndata: {}\r\n\r\n", want: []string{"{}"}},
		"comments and keep-alives":         {stream: ": keep-alive\n:\ndata: a\n: in between\ndata: b\n\n", want: []string{"a\nb"}},
		"other fields":                     {stream: "event: Alert\nretry: 1000\nid: 7\ndata: a\n\n", want: []string{"a"}},
		"events without data":              {stream: "id: 1\n\nevent: x\n\n\n\ndata: a\n\n", want: []string{"a"}},
		"a field named data without colon": {stream: "data\ndata: a\n\n", want: []string{"\na"}},
		"two events":                       {stream: "data: a\n\ndata: b\n\n", want: []string{"a", "b"}},
		"the stream ends mid-event":        {stream: "data: a\n\ndata: b\n", want: []string{"a"}},
		"the stream ends mid-line":         {stream: "data: a\n\ndata: b", want: []string{"a"}},
		"a line of the bound":              {stream: "data: " + strings.Repeat("a", limit-6) + "\n\n", want: []string{strings.Repeat("a", limit-6)}},
		"data of the bound, in two lines": {stream: "data: " + strings.Repeat("a", limit/2-1) + "\ndata: " + strings.Repeat("a", limit/2-2) + "\n\n",
			want: []string{strings.Repeat("a", limit/2-1) + "\n" + strings.Repeat("a", limit/2-2)}},
		"data over the bound, in lines": {stream: strings.Repeat("data: "+strings.Repeat("a", 20)+"\n", 4) + "\n",
			wantErr: "larger than"},
		"a line over the bound":            {stream: ": " + strings.Repeat("a", limit+1) + "\n", wantErr: "larger than"},
		"a line without end":               {stream: "data: " + strings.Repeat("a", 10*limit), wantErr: "larger than"},
		"many keep-alives, never an event": {stream: strings.Repeat(": keep-alive\n", 100), want: nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			var got []string
			err := redfish.ReadEvents(strings.NewReader(tc.stream), limit, func(data []byte) { got = append(got, string(data)) })
			if tc.wantErr == "" {
				g.Expect(errors.Is(err, io.EOF)).To(BeTrue(), "%v", err)
			} else {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
			}
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

// An event is about the system when one of its records names it as OriginOfCondition, or names no
// origin; anything else is not.
func TestAboutSystem(t *testing.T) {
	const system = "/redfish/v1/Systems/1"
	record := func(origin string) string { return `{"Events":[{"MessageId":"x"` + origin + `}]}` }
	tests := map[string]struct {
		data string
		want bool
	}{
		"the system, as a link":          {data: record(`,"OriginOfCondition":{"@odata.id":"/redfish/v1/Systems/1"}`), want: true},
		"the system, as a bare URI":      {data: record(`,"OriginOfCondition":"/redfish/v1/Systems/1"`), want: true},
		"the system, with a slash":       {data: record(`,"OriginOfCondition":{"@odata.id":"/redfish/v1/Systems/1/"}`), want: true},
		"the system, as an absolute URL": {data: record(`,"OriginOfCondition":{"@odata.id":"https://bmc/redfish/v1/Systems/1"}`), want: true},
		"no origin":                      {data: record(``), want: true},
		"a null origin":                  {data: record(`,"OriginOfCondition":null`), want: true},
		"a link without a URI":           {data: record(`,"OriginOfCondition":{}`), want: true},
		"another system":                 {data: record(`,"OriginOfCondition":{"@odata.id":"/redfish/v1/Systems/10"}`)},
		"a part of the system":           {data: record(`,"OriginOfCondition":{"@odata.id":"/redfish/v1/Systems/1/Processors/0"}`)},
		"an origin that is neither":      {data: record(`,"OriginOfCondition":42`)},
		"one record of several": {data: `{"Events":[{"OriginOfCondition":{"@odata.id":"/redfish/v1/Chassis/1"}},` +
			`{"OriginOfCondition":{"@odata.id":"/redfish/v1/Systems/1"}}]}`, want: true},
		"a MetricReport": {data: `{"@odata.type":"#MetricReport.v1_4_0.MetricReport","MetricValues":[]}`},
		"no records":     {data: `{"Events":[]}`},
		"not JSON":       {data: `power went off`},
		"a JSON array":   {data: `[]`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(redfish.AboutSystem([]byte(tc.data), system)).To(Equal(tc.want))
		})
	}
}
