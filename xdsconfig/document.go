package xdsconfig

import (
	"fmt"
	"strings"

	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/peerlimit/peerlimit/envoyrls"
)

// Document turns one RateLimitConfig resource into the YAML document a
// file with the same limits holds, named "xds:" and the resource's name,
// so that a configuration served over xDS is read by the same parser,
// with the same checks and meanings, as the same configuration from a
// file (upstream converts its protos to its YAML structs the same way).
//
// Where the proto cannot say "unset" the document leaves the field out
// as upstream's conversion does in effect: UNKNOWN is no unit (so a
// limited rule without one is refused, naming the field), and 0 is no
// requests_per_unit on an unlimited rate limit. An unlimited rate limit
// with a unit or a requests_per_unit is refused, as the same file is
// (upstream refuses the unit: "should not specify rate limit unit when
// unlimited").
func Document(c *rlsconfpb.RateLimitConfig) (envoyrls.Document, error) {
	return (&budget{}).document(c)
}

// budget bounds what the resources of one response may expand into
// before the parser sees them, with the parser's own limits: YAML indents
// each level, so a deeply nested resource of a few kilobytes would
// otherwise become hundreds of megabytes of text.
type budget struct {
	descriptors, metadata int
}

func (b *budget) document(c *rlsconfpb.RateLimitConfig) (envoyrls.Document, error) {
	if err := b.check(c.GetDescriptors(), 1); err != nil {
		return envoyrls.Document{}, fmt.Errorf("xds: resource %q: %w", c.GetName(), err)
	}
	if err := unlimitedAlone(c.GetDescriptors(), ""); err != nil {
		return envoyrls.Document{}, fmt.Errorf("xds: resource %q: domain %q, %w", c.GetName(), c.GetDomain(), err)
	}
	doc := yamlDomain{Domain: c.GetDomain(), Descriptors: descriptors(c.GetDescriptors())}
	data, err := yaml.Marshal(doc)
	if err != nil {
		return envoyrls.Document{}, fmt.Errorf("xds: resource %q: %w", c.GetName(), err)
	}
	return envoyrls.Document{Name: "xds:" + c.GetName(), Data: data}, nil
}

// The YAML form, in envoyproxy/ratelimit's field names.
type (
	yamlDomain struct {
		Domain      string           `yaml:"domain"`
		Descriptors []yamlDescriptor `yaml:"descriptors"`
	}
	yamlDescriptor struct {
		Key            string           `yaml:"key"`
		Value          string           `yaml:"value,omitempty"`
		RateLimit      *yamlRateLimit   `yaml:"rate_limit,omitempty"`
		Descriptors    []yamlDescriptor `yaml:"descriptors,omitempty"`
		ShadowMode     bool             `yaml:"shadow_mode,omitempty"`
		DetailedMetric bool             `yaml:"detailed_metric,omitempty"`
		QuotaMode      bool             `yaml:"quota_mode,omitempty"`
		Metadata       map[string]any   `yaml:"metadata,omitempty"`
	}
	yamlRateLimit struct {
		Unit            string        `yaml:"unit,omitempty"`
		RequestsPerUnit *uint32       `yaml:"requests_per_unit,omitempty"`
		Unlimited       bool          `yaml:"unlimited,omitempty"`
		Name            string        `yaml:"name,omitempty"`
		Replaces        []yamlReplace `yaml:"replaces,omitempty"`
	}
	yamlReplace struct {
		Name string `yaml:"name"`
	}
)

func descriptors(pbs []*rlsconfpb.RateLimitDescriptor) []yamlDescriptor {
	if len(pbs) == 0 {
		return nil
	}
	out := make([]yamlDescriptor, len(pbs))
	for i, d := range pbs {
		out[i] = yamlDescriptor{
			Key: d.GetKey(), Value: d.GetValue(), RateLimit: rateLimit(d.GetRateLimit()),
			Descriptors: descriptors(d.GetDescriptors()),
			ShadowMode:  d.GetShadowMode(), DetailedMetric: d.GetDetailedMetric(), QuotaMode: d.GetQuotaMode(),
		}
		if md := d.GetMetadata(); md != nil {
			out[i].Metadata = md.AsMap()
		}
	}
	return out
}

func rateLimit(p *rlsconfpb.RateLimitPolicy) *yamlRateLimit {
	if p == nil {
		return nil
	}
	r := &yamlRateLimit{Unlimited: p.GetUnlimited(), Name: p.GetName()}
	for _, rep := range p.GetReplaces() {
		r.Replaces = append(r.Replaces, yamlReplace{Name: rep.GetName()})
	}
	if r.Unlimited {
		return r
	}
	if u := p.GetUnit(); u != rlsconfpb.RateLimitUnit_UNKNOWN {
		r.Unit = strings.ToLower(u.String())
	}
	rpu := p.GetRequestsPerUnit()
	r.RequestsPerUnit = &rpu
	return r
}

// unlimitedAlone refuses an unlimited rate limit that also has a unit or
// a requests_per_unit, naming the descriptor as the parser does (parents
// first, key=value): the document cannot carry them, since it leaves
// them out of an unlimited rate limit, and so the parser cannot see them.
// Called after check, which bounds the depth.
func unlimitedAlone(ds []*rlsconfpb.RateLimitDescriptor, parents string) error {
	for _, d := range ds {
		chain := d.GetKey()
		if d.GetValue() != "" {
			chain += "=" + d.GetValue()
		}
		if parents != "" {
			chain = parents + " / " + chain
		}
		p := d.GetRateLimit()
		switch {
		case !p.GetUnlimited():
		case p.GetUnit() != rlsconfpb.RateLimitUnit_UNKNOWN:
			return fmt.Errorf("descriptor %s: should not specify rate limit unit when unlimited (unit %s)", chain, p.GetUnit())
		case p.GetRequestsPerUnit() != 0:
			return fmt.Errorf("descriptor %s: should not specify requests_per_unit when unlimited (requests_per_unit %d)", chain, p.GetRequestsPerUnit())
		}
		if err := unlimitedAlone(d.GetDescriptors(), chain); err != nil {
			return err
		}
	}
	return nil
}

// check counts ds and their metadata against the budget, and their depth
// against the parser's limit.
func (b *budget) check(ds []*rlsconfpb.RateLimitDescriptor, depth int) error {
	if len(ds) > 0 && depth > envoyrls.MaxDepth {
		return fmt.Errorf("descriptors nested deeper than %d levels", envoyrls.MaxDepth)
	}
	for _, d := range ds {
		if b.descriptors++; b.descriptors > envoyrls.MaxDescriptors {
			return fmt.Errorf("more than %d descriptors", envoyrls.MaxDescriptors)
		}
		if md := d.GetMetadata(); md != nil {
			if err := b.checkMetadata(structpb.NewStructValue(md), 1); err != nil {
				return err
			}
		}
		if err := b.check(d.GetDescriptors(), depth+1); err != nil {
			return err
		}
	}
	return nil
}

func (b *budget) checkMetadata(v *structpb.Value, depth int) error {
	if b.metadata++; b.metadata > envoyrls.MaxMetadataValues || depth > envoyrls.MaxDepth {
		return fmt.Errorf("metadata larger than %d values or nested deeper than %d levels", envoyrls.MaxMetadataValues, envoyrls.MaxDepth)
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_StructValue:
		for _, f := range k.StructValue.GetFields() {
			if err := b.checkMetadata(f, depth+1); err != nil {
				return err
			}
		}
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			if err := b.checkMetadata(e, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}
