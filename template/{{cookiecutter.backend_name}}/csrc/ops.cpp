{%- set p = project() -%}
// The collectives of the "{{ p.name }}" backend: the file you edit.
//
// Each function runs on the backend's worker thread with checked arguments
// (see ops.hpp for what is guaranteed). Replace each body with a call into
// your communication library and keep the signatures; the plumbing in
// backend.cpp does the rest: queueing, futures, timeouts and errors.
//
// As generated, this is the dummy backend of PyTorch's tutorial: every output
// is zeroed and nothing is sent.
#include "ops.hpp"

namespace {{ p.package }} {

bool supportsDtype(c10::ScalarType /* dtype */) {
  return true;  // The dummy only zeroes tensors, which works for every dtype.
}

bool supportsReduction(Reduction /* op */, c10::ScalarType /* dtype */) {
  return true;  // The dummy reduces nothing.
}

namespace ops {
{% for op in p.ops %}
// {{ op.summary }}
{{ op.returns }} {{ op.name }}(const OpContext& ctx{{ ", " ~ op.body if op.body }}) {
  // Your library's {{ op.name }} goes here.
  {{ op.dummy | indent(2) }}
}
{% endfor %}
} // namespace ops
} // namespace {{ p.package }}
