from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'fleet_styles.html.j2'

def root(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    pass
    yield 'article.run { border-top: 1px solid var(--line); padding-top: 12px; margin-top: 18px; }\narticle.run h3 { font-size: 16px; font-family: var(--mono); }\n.bad-chip { background: var(--bad-bg); color: var(--bad); border-color: transparent; font-family: var(--sans); font-size: 12px; }\n.critical { margin: 4px 0 8px; }\n.stragglers { margin: 4px 0; font-weight: 600; }\ntable.data td.reg { color: var(--bad); font-weight: 600; background: var(--bad-bg); }\ntable.data td.crit { font-weight: 700; text-decoration: underline; text-decoration-color: var(--bad); }\ntable.data tr.failed-row th, table.data tr.failed-row td { color: var(--bad); }\ntable.data td.notes { font-size: 12px; color: var(--fg2); min-width: 48ch; max-width: 90ch; overflow-wrap: anywhere; }\ntable.data td.top, table.data td.time { white-space: nowrap; font-size: 12px; }\ntable.data td.err { color: var(--bad); overflow-wrap: anywhere; }\ntable.host-table tbody th { font-family: var(--mono); font-size: 12px; white-space: nowrap; }\ni.reg-sw { background: var(--bad); }\n.chart .regressed { fill: var(--bad); }\n.chart .step-line { fill: none; stroke: var(--fg); stroke-width: 1.2; stroke-dasharray: 4 3; opacity: .7; }\n.chart .strag-frame { fill: none; stroke: var(--bad); stroke-width: 1.5; }\n'

blocks = {}
debug_info = ''