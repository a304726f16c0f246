{%- set p = project() -%}
// The collectives this backend offers, one override of c10d::Backend each:
// it checks the call on the caller's thread, then queues the body, ops::<op>
// in ops.cpp. Rendered from the catalogue for the ops this project chose; the
// runtime (runtime/, whose backend.cpp includes this header) does the rest.
// torch.distributed raises "Backend <name> does not support <op>" for every
// other collective.
#pragma once

#include "runtime/backend.hpp"
#include "runtime/checks.hpp"

namespace NEW_BACKEND_NAMESPACE {

class Collectives final : public Backend {
 public:
  using Backend::Backend;
{% for op in p.ops %}
  // {{ op.summary }}
{%- if op.renamed %}
#if NEW_BACKEND_TORCH_2_14
  c10::intrusive_ptr<c10d::Work> {{ op.renamed.name }}(
#else
  c10::intrusive_ptr<c10d::Work> {{ op.name }}(
#endif
{%- elif op.since %}
#if NEW_BACKEND_TORCH_{{ op.since | replace(".", "_") }}  // added in torch {{ op.since }}
  c10::intrusive_ptr<c10d::Work> {{ op.name }}(
{%- else %}
  c10::intrusive_ptr<c10d::Work> {{ op.name }}(
{%- endif %}
      {{ op.params_wrapped("      ") }}) override {
{%- if op.checks %}
    const Check check(*group_, __func__);
    {{ op.checks | indent(4) }}
{%- endif %}
{%- if op.op_type_renamed %}
#if NEW_BACKEND_TORCH_2_14
    const auto type = c10d::OpType::{{ op.op_type_renamed.name }};
#else
    const auto type = c10d::OpType::{{ op.op_type }};
#endif
{%- endif %}
{%- set head = "    return enqueue(Runs::" ~ ("kOnReceives" if op.on_receive_queue else "kHere" if op.on_caller_thread else "kOnQueue") ~ ", " ~ ("type" if op.op_type_renamed else "c10d::OpType::" ~ op.op_type) ~ ", __func__, " ~ op.timeout ~ "," %}
{%- set tensors = op.outputs ~ ", " ~ (op.inputs or "{}") ~ "," %}
{%- if (head ~ " " ~ tensors) | length <= 100 %}
{{ head }} {{ tensors }}
{%- else %}
{{ head }}
        {{ tensors }}
{%- endif %}
{%- set peer = "dstRank" if "int dstRank" in op.params else "srcRank" if "int srcRank" in op.params else "" %}
{%- if op.returns == "int" %}
        [=](const OpContext& ctx, Work& work) mutable { work.sourceRank_ = ops::{{ op.name }}(ctx{{ ", " ~ op.args if op.args }}); }{{ ", " ~ peer if peer }});
{%- else %}
        [=](const OpContext& ctx, Work&) mutable { ops::{{ op.name }}(ctx{{ ", " ~ op.args if op.args }}); }{{ ", " ~ peer if peer }});
{%- endif %}
  }
{%- if op.since %}
#endif
{%- endif %}
{% endfor %}
};

} // namespace NEW_BACKEND_NAMESPACE
