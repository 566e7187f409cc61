from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'diff.html.j2'

def root(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    l_0_r = resolve('r')
    l_0_delta_table = missing
    try:
        t_1 = environment.filters['length']
    except KeyError:
        @internalcode
        def t_1(*unused):
            raise TemplateRuntimeError("No filter named 'length' found.")
    pass
    yield '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<meta name="viewport" content="width=device-width, initial-scale=1">\n<meta name="color-scheme" content="light dark">\n<meta name="generator" content="profanalyze '
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'tool_version'))
    yield '">\n<title>'
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'title'))
    yield '</title>\n<style>\n'
    template = environment.get_template('_styles.html.j2', 'diff.html.j2')
    gen = template.root_render_func(template.new_context(context.get_all(), True, {'delta_table': l_0_delta_table}))
    try:
        for event in gen:
            yield event
    finally: gen.close()
    yield '\n/* compare page */\n.vs { font-family: var(--mono); font-size: 13px; color: var(--fg2); max-width: 70ch; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }\n.dbar { display: flex; height: 10px; min-width: 120px; margin-top: 4px; }\n.dbar span { flex: 1; display: flex; background: var(--grid); }\n.dbar span.l { justify-content: flex-end; border-right: 1px solid var(--muted); }\n.dbar span.l i { display: block; height: 100%; background: var(--good); }\n.dbar span.r i { display: block; height: 100%; background: var(--bad); }\n.vd { padding: 0 6px; border-radius: 8px; font-size: 12px; white-space: nowrap; }\n.vd.bad { background: var(--bad-bg); color: var(--bad); } .vd.good { background: var(--good-bg); color: var(--good); } .vd.neutral { color: var(--muted); }\ntable.data tr.overlay th, table.data tr.overlay td { color: var(--fg2); font-style: italic; }\ndl.sides { display: grid; grid-template-columns: max-content minmax(0, 1fr) minmax(0, 1fr); gap: 2px 16px; margin: 10px 0; font-size: 13px; }\ndl.sides dt { color: var(--muted); } dl.sides dd { margin: 0; overflow-wrap: anywhere; }\ndl.sides .h { font-size: 11.5px; color: var(--muted); text-transform: uppercase; letter-spacing: .4px; }\n</style>\n</head>\n<body>\n<header class="topbar">\n  <div class="topbar-in">\n    <div class="brand">profanalyze compare<span class="ver">'
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'tool_version'))
    yield '</span></div>\n    <div class="vs" title="'
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'base_label'))
    yield ' → '
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'new_label'))
    yield '">'
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'base_name'))
    yield ' → '
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'new_name'))
    yield '</div>\n    <nav aria-label="Sections"><a href="#summary">Summary</a><a href="#buckets">Buckets</a><a href="#communication">Communication</a><a href="#findings">Findings</a><a href="#ops">Ops</a><a href="#method">Method</a></nav>\n  </div>\n</header>\n<main>\n\n<section id="summary" class="summary" aria-labelledby="summary-h">\n  <h1 id="summary-h">What changed?</h1>\n  <p class="headline" id="headline" data-verdict="'
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'verdict'))
    yield '">'
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'headline'))
    yield '</p>\n  <div class="kpis">'
    for l_1_k in environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'kpis'):
        _loop_vars = {}
        pass
        yield '\n    <div class="kpi tone-'
        yield escape(environment.getattr(l_1_k, 'tone'))
        yield '" id="'
        yield escape(environment.getattr(l_1_k, 'id'))
        yield '">\n      <div class="kpi-label">'
        yield escape(environment.getattr(l_1_k, 'label'))
        yield '</div>\n      <div class="kpi-value">'
        yield escape(environment.getattr(l_1_k, 'value'))
        yield '</div>\n      <div class="kpi-sub">'
        yield escape(environment.getattr(l_1_k, 'sub'))
        yield '</div>\n    </div>'
    l_1_k = missing
    yield '\n  </div>\n  <dl class="sides" id="sides">\n    <dt></dt><dd class="h">Base</dd><dd class="h">New</dd>'
    for l_1_f in environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'facts'):
        _loop_vars = {}
        pass
        yield '\n    <dt>'
        yield escape(environment.getattr(l_1_f, 'label'))
        yield '</dt><dd>'
        yield escape(environment.getattr(l_1_f, 'base'))
        yield '</dd><dd>'
        yield escape(environment.getattr(l_1_f, 'new'))
        yield '</dd>'
    l_1_f = missing
    yield '\n  </dl>'
    for l_1_n in environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'notes'):
        _loop_vars = {}
        pass
        yield '<p class="note">Note: '
        yield escape(l_1_n)
        yield '</p>'
    l_1_n = missing
    yield '\n</section>'
    def macro(l_1_rows, l_1_id, l_1_caption, l_1_first, l_1_extra_col, l_1_overlay):
        t_2 = []
        if l_1_rows is missing:
            l_1_rows = undefined("parameter 'rows' was not provided", name='rows')
        if l_1_id is missing:
            l_1_id = undefined("parameter 'id' was not provided", name='id')
        if l_1_caption is missing:
            l_1_caption = undefined("parameter 'caption' was not provided", name='caption')
        if l_1_first is missing:
            l_1_first = undefined("parameter 'first' was not provided", name='first')
        if l_1_extra_col is missing:
            l_1_extra_col = None
        if l_1_overlay is missing:
            l_1_overlay = None
        pass
        t_2.extend((
            '\n<table class="data" id="',
            escape(l_1_id),
            '">\n  <caption>',
            escape(l_1_caption),
            '</caption>\n  <thead><tr><th scope="col">',
            escape(l_1_first),
            '</th>',
        ))
        if l_1_extra_col:
            pass
            t_2.extend((
                '<th scope="col">',
                escape(l_1_extra_col),
                '</th>',
            ))
        t_2.append(
            '<th scope="col" class="num">Base ms</th><th scope="col" class="num">New ms</th><th scope="col" class="num">Δ ms</th><th scope="col" class="num">Base</th><th scope="col" class="num">New</th><th scope="col" class="num">Δ</th><th scope="col" class="num">Noise ms</th><th scope="col">Verdict</th><th scope="col" class="barcol">faster ← → slower</th></tr></thead>\n  <tbody>',
        )
        for l_2_b in l_1_rows:
            _loop_vars = {}
            pass
            t_2.extend((
                '\n    <tr data-key="',
                escape(environment.getattr(l_2_b, 'key')),
                '" data-verdict="',
                escape(environment.getattr(l_2_b, 'verdict')),
                '"',
            ))
            if environment.getattr(l_2_b, 'zero'):
                pass
                t_2.append(
                    ' class="zero"',
                )
            t_2.extend((
                '><th scope="row"><i class="sw" style="background:',
                escape(environment.getattr(l_2_b, 'colour')),
                '"></i>',
                escape(environment.getattr(l_2_b, 'label')),
                '</th>',
            ))
            if l_1_extra_col:
                pass
                t_2.extend((
                    '<td>',
                    escape(environment.getattr(l_2_b, 'extra')),
                    '</td>',
                ))
            t_2.extend((
                '<td class="num">',
                escape(environment.getattr(l_2_b, 'base_ms')),
                '</td><td class="num">',
                escape(environment.getattr(l_2_b, 'new_ms')),
                '</td><td class="num">',
                escape(environment.getattr(l_2_b, 'delta_ms')),
                '</td><td class="num">',
                escape(environment.getattr(l_2_b, 'base_pct')),
                '</td><td class="num">',
                escape(environment.getattr(l_2_b, 'new_pct')),
                '</td><td class="num">',
                escape(environment.getattr(l_2_b, 'delta_pts')),
                '</td><td class="num">',
                escape(environment.getattr(l_2_b, 'noise')),
                '</td><td><span class="vd ',
                escape(environment.getattr(l_2_b, 'tone')),
                '">',
                escape(environment.getattr(l_2_b, 'verdict')),
                '</span></td>\n      <td class="barcol"><span class="dbar" title="',
                escape(environment.getattr(l_2_b, 'delta_ms')),
                ' ms"><span class="l"><i style="width:',
                escape(environment.getattr(l_2_b, 'neg_w')),
                '"></i></span><span class="r"><i style="width:',
                escape(environment.getattr(l_2_b, 'pos_w')),
                '"></i></span></span></td></tr>',
            ))
        l_2_b = missing
        t_2.append(
            '\n  </tbody>',
        )
        if l_1_overlay:
            pass
            t_2.extend((
                '\n  <tfoot><tr class="overlay" data-key="',
                escape(environment.getattr(l_1_overlay, 'key')),
                '" data-verdict="',
                escape(environment.getattr(l_1_overlay, 'verdict')),
                '"><th scope="row">',
                escape(environment.getattr(l_1_overlay, 'label')),
                '</th><td class="num">',
                escape(environment.getattr(l_1_overlay, 'base_ms')),
                '</td><td class="num">',
                escape(environment.getattr(l_1_overlay, 'new_ms')),
                '</td><td class="num">',
                escape(environment.getattr(l_1_overlay, 'delta_ms')),
                '</td><td class="num">',
                escape(environment.getattr(l_1_overlay, 'base_pct')),
                '</td><td class="num">',
                escape(environment.getattr(l_1_overlay, 'new_pct')),
                '</td><td class="num">',
                escape(environment.getattr(l_1_overlay, 'delta_pts')),
                '</td><td class="num">',
                escape(environment.getattr(l_1_overlay, 'noise')),
                '</td><td><span class="vd ',
                escape(environment.getattr(l_1_overlay, 'tone')),
                '">',
                escape(environment.getattr(l_1_overlay, 'verdict')),
                '</span></td>\n    <td class="barcol"><span class="dbar"><span class="l"><i style="width:',
                escape(environment.getattr(l_1_overlay, 'neg_w')),
                '"></i></span><span class="r"><i style="width:',
                escape(environment.getattr(l_1_overlay, 'pos_w')),
                '"></i></span></span></td></tr></tfoot>',
            ))
        t_2.append(
            '\n</table>',
        )
        return concat(t_2)
    context.exported_vars.add('delta_table')
    context.vars['delta_table'] = l_0_delta_table = Macro(environment, macro, 'delta_table', ('rows', 'id', 'caption', 'first', 'extra_col', 'overlay'), False, False, False, context.eval_ctx.autoescape)
    yield '\n\n<section id="buckets" aria-labelledby="buckets-h">\n  <h2 id="buckets-h">Step breakdown <span class="h-sub">ms per kept step per TensorCore; Δ in points of the step</span></h2>\n  <div class="scroll">'
    yield escape(context.call((undefined(name='delta_table') if l_0_delta_table is missing else l_0_delta_table), environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'buckets'), 'bucket-delta-table', 'Buckets sum to the step time on each side, so their Δ ms sum to the step-time Δ. Noise: one sigma of the delta from the per-step spread.', 'Bucket', overlay=environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'remat')))
    yield '</div>\n</section>\n\n<section id="communication" aria-labelledby="comm-h">\n  <h2 id="comm-h">Exposed communication <span class="h-sub">per collective type</span></h2>'
    if environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'comm'):
        pass
        yield '\n  <div class="scroll">'
        yield escape(context.call((undefined(name='delta_table') if l_0_delta_table is missing else l_0_delta_table), environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'comm'), 'comm-delta-table', "Exposed = the time the collective's own ops occupy the TensorCore. Engine: where the collective ran (base → new).", 'Type', extra_col='Engine'))
        yield '</div>'
    else:
        pass
        yield '\n  <p class="empty">No collectives on either side.</p>'
    yield '\n</section>\n\n<section id="findings" aria-labelledby="findings-h">\n  <h2 id="findings-h">Findings <span class="h-sub">by rule code</span></h2>'
    if environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'findings'):
        pass
        yield '\n  <table class="data" id="findings-table">\n    <thead><tr><th scope="col">Code</th><th scope="col">Lever</th><th scope="col">Finding</th><th scope="col">Status</th><th scope="col" class="num">Saving (base)</th><th scope="col" class="num">Saving (new)</th></tr></thead>\n    <tbody>'
        for l_1_f in environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'findings'):
            _loop_vars = {}
            pass
            yield '<tr data-code="'
            yield escape(environment.getattr(l_1_f, 'code'))
            yield '" data-status="'
            yield escape(environment.getattr(l_1_f, 'status'))
            yield '"><th scope="row">'
            yield escape(environment.getattr(l_1_f, 'code'))
            yield '</th><td>'
            yield escape(environment.getattr(l_1_f, 'lever'))
            yield '</td><td>'
            yield escape(environment.getattr(l_1_f, 'title'))
            yield '</td><td><span class="vd '
            yield escape(environment.getattr(l_1_f, 'tone'))
            yield '">'
            yield escape(environment.getattr(l_1_f, 'status'))
            yield '</span></td><td class="num">'
            yield escape(environment.getattr(l_1_f, 'base'))
            yield '</td><td class="num">'
            yield escape(environment.getattr(l_1_f, 'new'))
            yield '</td></tr>'
        l_1_f = missing
        yield '\n    </tbody>\n  </table>'
    else:
        pass
        yield '\n  <p class="empty">No findings on either side.</p>'
    yield '\n</section>\n\n<section id="ops" aria-labelledby="ops-h">\n  <h2 id="ops-h">Ops that changed <span class="h-sub">matched across compiles</span></h2>\n  <p class="muted">Match key: '
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'op_key'))
    yield '. Instruction numbers change between compiles, so they are not part of the key.</p>'
    for l_1_t in environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'op_tables'):
        _loop_vars = {}
        pass
        yield '\n  <h3>'
        yield escape(environment.getattr(l_1_t, 'title'))
        yield ' <span class="h-sub">'
        yield escape(t_1(environment.getattr(l_1_t, 'rows')))
        yield '</span></h3>'
        if environment.getattr(l_1_t, 'rows'):
            pass
            yield '\n  <div class="scroll">\n  <table class="data compact" id="'
            yield escape(environment.getattr(l_1_t, 'id'))
            yield '">\n    <caption>'
            yield escape(environment.getattr(l_1_t, 'note'))
            yield '</caption>\n    <thead><tr><th scope="col">Op</th><th scope="col">tf_op</th><th scope="col">Bucket</th><th scope="col" class="num">Base ms</th><th scope="col" class="num">New ms</th><th scope="col" class="num">Δ ms</th><th scope="col" class="num">Δ / step</th><th scope="col">Instructions</th></tr></thead>\n    <tbody>'
            for l_2_o in environment.getattr(l_1_t, 'rows'):
                _loop_vars = {}
                pass
                yield '<tr><td class="op" title="'
                yield escape(environment.getattr(l_2_o, 'name_full'))
                yield '">'
                yield escape(environment.getattr(l_2_o, 'name'))
                yield '</td><td class="op" title="'
                yield escape(environment.getattr(l_2_o, 'tf_op_full'))
                yield '">'
                yield escape(environment.getattr(l_2_o, 'tf_op'))
                yield '</td><td>'
                yield escape(environment.getattr(l_2_o, 'bucket'))
                yield '</td><td class="num">'
                yield escape(environment.getattr(l_2_o, 'base_ms'))
                yield '</td><td class="num">'
                yield escape(environment.getattr(l_2_o, 'new_ms'))
                yield '</td><td class="num">'
                yield escape(environment.getattr(l_2_o, 'delta_ms'))
                yield '</td><td class="num">'
                yield escape(environment.getattr(l_2_o, 'delta_pct'))
                yield '</td><td class="tags">'
                yield escape(environment.getattr(l_2_o, 'names'))
                yield '</td></tr>'
            l_2_o = missing
            yield '\n    </tbody>\n  </table>\n  </div>'
        else:
            pass
            yield '\n  <p class="empty">None.</p>'
    l_1_t = missing
    yield '\n</section>\n\n<section id="method" aria-labelledby="method-h">\n  <h2 id="method-h">Method</h2>\n  <dl class="deflist defs">'
    for (l_1_k, l_1_v) in environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'method'):
        _loop_vars = {}
        pass
        yield '<dt>'
        yield escape(l_1_k)
        yield '</dt><dd>'
        yield escape(l_1_v)
        yield '</dd>'
    l_1_k = l_1_v = missing
    yield '\n  </dl>\n</section>\n\n</main>\n<footer id="footer">\n  <div>profanalyze <span id="tool-version">'
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'tool_version'))
    yield '</span> compare</div>\n  <div>Base: <code>'
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'base_label'))
    yield '</code></div>\n  <div>New: <code>'
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'new_label'))
    yield '</code></div>\n</footer>\n</body>\n</html>\n'

blocks = {}
debug_info = '9=20&10=22&12=24&31=31&32=33&40=41&42=45&43=49&44=53&45=55&46=57&52=61&53=65&56=73&59=81&60=98&61=100&62=102&64=115&65=120&66=164&69=175&70=179&71=203&78=215&83=217&84=220&92=226&96=229&106=257&107=259&108=263&109=267&111=270&112=272&115=274&128=305&134=315&135=317&136=319'