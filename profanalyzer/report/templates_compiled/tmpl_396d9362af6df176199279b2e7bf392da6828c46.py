from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'report.html.j2'

def root(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    l_0_r = resolve('r')
    l_0_op_table = missing
    try:
        t_1 = environment.filters['join']
    except KeyError:
        @internalcode
        def t_1(*unused):
            raise TemplateRuntimeError("No filter named 'join' found.")
    try:
        t_2 = environment.filters['length']
    except KeyError:
        @internalcode
        def t_2(*unused):
            raise TemplateRuntimeError("No filter named 'length' found.")
    pass
    yield '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<meta name="viewport" content="width=device-width, initial-scale=1">\n<meta name="color-scheme" content="light dark">\n<meta name="generator" content="profanalyze '
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'tool_version'))
    yield '">\n<title>'
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'title'))
    yield '</title>\n<style>\n'
    template = environment.get_template('_styles.html.j2', 'report.html.j2')
    gen = template.root_render_func(template.new_context(context.get_all(), True, {'op_table': l_0_op_table}))
    try:
        for event in gen:
            yield event
    finally: gen.close()
    yield '\n</style>\n</head>\n<body>\n<header class="topbar">\n  <div class="topbar-in">\n    <div class="brand">profanalyze<span class="ver">'
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'tool_version'))
    yield '</span></div>\n    <div class="tracename" title="'
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'trace_path'))
    yield '">'
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'trace_name'))
    yield '</div>\n    <nav aria-label="Sections">'
    for l_1_n in environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'nav'):
        _loop_vars = {}
        pass
        yield '<a href="#'
        yield escape(environment.getattr(l_1_n, 'id'))
        yield '">'
        yield escape(environment.getattr(l_1_n, 'label'))
        yield '</a>'
    l_1_n = missing
    yield '</nav>\n  </div>\n</header>\n<main>\n\n<section id="summary" class="summary" aria-labelledby="summary-h">\n  <h1 id="summary-h">Where did the step go?</h1>\n  <p class="headline" id="headline">'
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
    yield '\n  </div>\n  <figure class="share" id="share">\n    '
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'share_chart'))
    yield '\n    <figcaption class="legend" aria-label="Bucket colours">'
    for l_1_l in environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'legend'):
        _loop_vars = {}
        pass
        yield '<span class="lg"><i style="background:'
        yield escape(environment.getattr(l_1_l, 'colour'))
        yield '"></i>'
        yield escape(environment.getattr(l_1_l, 'label'))
        yield '</span>'
    l_1_l = missing
    yield '</figcaption>\n  </figure>'
    if environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'first_action'):
        pass
        yield '\n  <p class="first-action" id="first-action"><a href="#recommendations">'
        yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'first_action'))
        yield '</a></p>'
    yield '\n  <div class="facts-row">\n    <dl class="facts">'
    for l_1_f in environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'facts'):
        _loop_vars = {}
        pass
        yield '\n      <div'
        if environment.getattr(l_1_f, 'id'):
            pass
            yield ' id="'
            yield escape(environment.getattr(l_1_f, 'id'))
            yield '"'
        yield '><dt>'
        yield escape(environment.getattr(l_1_f, 'label'))
        yield '</dt><dd'
        if environment.getattr(l_1_f, 'tip'):
            pass
            yield ' title="'
            yield escape(environment.getattr(l_1_f, 'tip'))
            yield '"'
        yield '>'
        yield escape(environment.getattr(l_1_f, 'value'))
        yield '</dd></div>'
    l_1_f = missing
    yield '\n    </dl>\n    <div class="defs">'
    for l_1_d in environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'definitions'):
        _loop_vars = {}
        pass
        yield '\n      <p id="'
        yield escape(environment.getattr(l_1_d, 'id'))
        yield '"><b>'
        yield escape(environment.getattr(l_1_d, 'label'))
        yield ':</b> '
        yield escape(environment.getattr(l_1_d, 'value'))
        yield '</p>'
    l_1_d = missing
    yield '\n      <details>\n        <summary>All definitions'
    if environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'notes'):
        pass
        yield ' and notes ('
        yield escape(t_2(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'notes')))
        yield ')'
    yield '</summary>\n        <dl class="deflist">'
    for l_1_d in environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'all_definitions'):
        _loop_vars = {}
        pass
        yield '<dt>'
        yield escape(environment.getattr(l_1_d, 'label'))
        yield '</dt><dd>'
        yield escape(environment.getattr(l_1_d, 'value'))
        yield '</dd>'
    l_1_d = missing
    yield '</dl>'
    for l_1_n in environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'notes'):
        _loop_vars = {}
        pass
        yield '<p class="note">Note: '
        yield escape(l_1_n)
        yield '</p>'
    l_1_n = missing
    yield '\n      </details>\n    </div>\n  </div>\n</section>\n\n<section id="recommendations" aria-labelledby="recs-h">\n  <h2 id="recs-h">What to change first <span class="h-sub">ranked by estimated saving per step</span></h2>'
    if environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'workload'):
        pass
        yield '\n  <p class="workload" id="workload"><b>Workload:</b> '
        yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'workload'), 'row'))
        yield ' — primary sharding '
        yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'workload'), 'primary_sharding'))
        if environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'workload'), 'secondary_sharding'):
            pass
            yield ', then '
            yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'workload'), 'secondary_sharding'))
        yield '; typical bottleneck: '
        yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'workload'), 'main_bottleneck'))
        yield '.'
        if environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'workload'), 'reasons'):
            pass
            yield ' <span class="muted">('
            yield escape(t_1(context.eval_ctx, environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'workload'), 'reasons'), '; '))
            yield ')</span>'
        yield '</p>'
    if (environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'recs'), 'status') != 'ok'):
        pass
        yield '\n  <p class="empty" id="recs-status" data-status="'
        yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'recs'), 'status'))
        yield '">'
        yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'recs'), 'message'))
        if environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'recs'), 'rules_run'):
            pass
            yield ' <span class="muted">Rules run: '
            yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'recs'), 'rules_run'))
            yield '.</span>'
        yield '</p>'
    else:
        pass
        yield '\n  <p class="muted">'
        yield escape(t_2(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'recs'), 'cards')))
        yield ' recommendation'
        yield escape(('s' if (t_2(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'recs'), 'cards')) != 1) else cond_expr_undefined("the inline if-expression on line 78 in 'report.html.j2' evaluated to false and no else section was defined.")))
        yield '; together up to '
        yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'recs'), 'total_ms'))
        yield ' ms/step ('
        yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'recs'), 'total_pct'))
        yield '), savings already net of overlaps between them. Rules run: '
        yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'recs'), 'rules_run'))
        yield '.</p>'
        for l_1_c in environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'recs'), 'cards'):
            _loop_vars = {}
            pass
            yield '\n  <article class="card sev-'
            yield escape(environment.getattr(l_1_c, 'severity'))
            yield '" id="rec-'
            yield escape(environment.getattr(l_1_c, 'rank'))
            yield '" data-code="'
            yield escape(environment.getattr(l_1_c, 'code'))
            yield '" data-lever="'
            yield escape(environment.getattr(l_1_c, 'lever'))
            yield '">\n    <div class="card-head">\n      <div class="rank" aria-label="rank">'
            yield escape(environment.getattr(l_1_c, 'rank'))
            yield '</div>\n      <div class="card-title">\n        <h3>'
            yield escape(environment.getattr(l_1_c, 'title'))
            yield '</h3>\n        <div class="chips">\n          <span class="chip lever" data-field="lever">'
            yield escape(environment.getattr(l_1_c, 'lever_label'))
            yield '</span>\n          <code class="chip rule-code" data-field="code">'
            yield escape(environment.getattr(l_1_c, 'code'))
            yield '</code>\n          <span class="chip sev">'
            yield escape(environment.getattr(l_1_c, 'severity'))
            yield '</span>\n          <span class="guide" data-field="guide">'
            yield escape(environment.getattr(l_1_c, 'guide_section'))
            yield '</span>\n        </div>\n      </div>\n      <div class="saving" data-field="saving">\n        <div class="saving-ms"><span class="v">−'
            yield escape(environment.getattr(l_1_c, 'saving_ms'))
            yield '</span> ms/step</div>\n        <div class="saving-pct">'
            yield escape(environment.getattr(l_1_c, 'saving_pct'))
            yield ' of the step</div>\n        <div class="meter" aria-hidden="true"><i style="width:'
            yield escape(environment.getattr(l_1_c, 'saving_bar'))
            yield '"></i></div>\n      </div>\n    </div>\n    <div class="card-body">\n      <div class="col">\n        <h4>Evidence</h4>\n        <ul class="evidence">'
            for l_2_e in environment.getattr(l_1_c, 'evidence'):
                _loop_vars = {}
                pass
                yield '<li>'
                yield escape(l_2_e)
                yield '</li>'
            l_2_e = missing
            yield '</ul>'
            if environment.getattr(l_1_c, 'assumptions'):
                pass
                yield '\n        <h4>Assumptions</h4>\n        <ul class="assumptions">'
                for l_2_e in environment.getattr(l_1_c, 'assumptions'):
                    _loop_vars = {}
                    pass
                    yield '<li>'
                    yield escape(l_2_e)
                    yield '</li>'
                l_2_e = missing
                yield '</ul>'
            if environment.getattr(l_1_c, 'merged_note'):
                pass
                yield '<p class="note">'
                yield escape(environment.getattr(l_1_c, 'merged_note'))
                yield '</p>'
            yield '\n      </div>\n      <div class="col">\n        <h4>Change</h4>\n        <div class="codeblock" data-field="actions"><button type="button" class="copy" aria-label="Copy the change">Copy</button><pre><code>'
            yield escape(environment.getattr(l_1_c, 'actions'))
            yield '</code></pre></div>\n      </div>\n    </div>'
            if environment.getattr(l_1_c, 'doc'):
                pass
                yield '\n    <details class="doc">\n      <summary>About rule '
                yield escape(environment.getattr(l_1_c, 'code'))
                yield '</summary>\n      <dl>\n        <dt>What it detects</dt><dd>'
                yield escape(environment.getattr(environment.getattr(l_1_c, 'doc'), 'detects'))
                yield '</dd>\n        <dt>Why it costs time</dt><dd>'
                yield escape(environment.getattr(environment.getattr(l_1_c, 'doc'), 'why'))
                yield '</dd>\n        <dt>What to change</dt><dd>'
                yield escape(environment.getattr(environment.getattr(l_1_c, 'doc'), 'change'))
                yield '</dd>\n      </dl>\n    </details>'
            yield '\n  </article>'
        l_1_c = missing
    yield '\n</section>\n\n<section id="breakdown" aria-labelledby="bd-h">\n  <h2 id="bd-h">Step breakdown <span class="h-sub">exclusive time per bucket; mean step '
    yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'breakdown'), 'total_ms'))
    yield ' ms</span></h2>\n  <figure>\n    '
    yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'breakdown'), 'chart'))
    yield '\n    <figcaption class="legend">'
    for l_1_l in environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'legend'):
        _loop_vars = {}
        pass
        yield '<span class="lg"><i style="background:'
        yield escape(environment.getattr(l_1_l, 'colour'))
        yield '"></i>'
        yield escape(environment.getattr(l_1_l, 'label'))
        yield '</span>'
    l_1_l = missing
    yield '<span class="lg"><i class="hatch-sw"></i>dropped step</span>\n    </figcaption>\n  </figure>'
    if environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'breakdown'), 'dropped'):
        pass
        yield '\n  <p class="muted" id="dropped">Dropped steps (not in any number below):'
        l_1_loop = missing
        for l_1_d, l_1_loop in LoopContext(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'breakdown'), 'dropped'), undefined):
            _loop_vars = {}
            pass
            yield ' step '
            yield escape(environment.getattr(l_1_d, 'number'))
            yield ' ('
            yield escape(environment.getattr(l_1_d, 'ms'))
            yield ' ms: '
            yield escape(environment.getattr(l_1_d, 'reason'))
            yield ')'
            yield escape((';' if (not environment.getattr(l_1_loop, 'last')) else '.'))
        l_1_loop = l_1_d = missing
        yield '</p>'
    yield '\n  <div class="two">\n    <table class="data buckets" id="bucket-table">\n      <caption>Mean per kept step, averaged over TensorCores</caption>\n      <thead><tr><th scope="col">Bucket</th><th scope="col" class="num">ms/step</th><th scope="col" class="num">Share</th><th scope="col" class="barcol"><span class="sr">bar</span></th></tr></thead>\n      <tbody>'
    for l_1_b in environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'breakdown'), 'rows'):
        _loop_vars = {}
        pass
        yield '\n        <tr data-bucket="'
        yield escape(environment.getattr(l_1_b, 'key'))
        yield '" class="k-'
        yield escape(environment.getattr(l_1_b, 'kind'))
        if environment.getattr(l_1_b, 'zero'):
            pass
            yield ' zero'
        yield '"><th scope="row"><i class="sw" style="background:'
        yield escape(environment.getattr(l_1_b, 'colour'))
        yield '"></i>'
        yield escape(environment.getattr(l_1_b, 'label'))
        yield '</th><td class="num ms">'
        yield escape(environment.getattr(l_1_b, 'ms'))
        yield '</td><td class="num pct">'
        yield escape(environment.getattr(l_1_b, 'pct'))
        yield '</td><td class="barcol"><span class="hbar"><i style="width:'
        yield escape(environment.getattr(l_1_b, 'bar'))
        yield ';background:'
        yield escape(environment.getattr(l_1_b, 'colour'))
        yield '"></i></span></td></tr>'
    l_1_b = missing
    yield '\n      </tbody>\n      <tfoot>\n        <tr data-bucket="total"><th scope="row">Step (mean)</th><td class="num">'
    yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'breakdown'), 'total_ms'))
    yield '</td><td class="num">100.0%</td><td></td></tr>\n        <tr data-bucket="remat" class="k-overlay"><th scope="row">'
    yield escape(environment.getattr(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'breakdown'), 'remat'), 'label'))
    yield '</th><td class="num ms">'
    yield escape(environment.getattr(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'breakdown'), 'remat'), 'ms'))
    yield '</td><td class="num pct">'
    yield escape(environment.getattr(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'breakdown'), 'remat'), 'pct'))
    yield '</td><td class="barcol"><span class="hbar"><i class="overlay" style="width:'
    yield escape(environment.getattr(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'breakdown'), 'remat'), 'bar'))
    yield '"></i></span></td></tr>\n      </tfoot>\n    </table>\n    <table class="data phases" id="phase-table">\n      <caption>By training phase (from name scopes; overlaps the buckets)</caption>\n      <thead><tr><th scope="col">Phase</th><th scope="col" class="num">ms/step</th><th scope="col" class="num">Share</th></tr></thead>\n      <tbody>'
    for l_1_p in environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'breakdown'), 'phases'):
        _loop_vars = {}
        pass
        yield '<tr><th scope="row">'
        yield escape(environment.getattr(l_1_p, 'label'))
        yield '</th><td class="num">'
        yield escape(environment.getattr(l_1_p, 'ms'))
        yield '</td><td class="num">'
        yield escape(environment.getattr(l_1_p, 'pct'))
        yield '</td></tr>'
    l_1_p = missing
    yield '\n      </tbody>\n    </table>\n  </div>\n</section>\n\n<section id="timeline" aria-labelledby="tl-h">\n  <h2 id="tl-h">One representative step <span class="h-sub">one lane per engine; collective windows shaded</span></h2>'
    if environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'timeline'):
        pass
        yield '\n  <p class="muted">'
        yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'timeline'), 'caption'))
        yield ' '
        yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'timeline'), 'window_counts'))
        yield '. '
        yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'timeline'), 'note'))
        yield '</p>\n  <figure>\n    '
        yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'timeline'), 'chart'))
        yield '\n    <figcaption class="legend">'
        for l_1_l in environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'timeline'), 'legend'):
            _loop_vars = {}
            pass
            yield '<span class="lg"><i style="background:'
            yield escape(environment.getattr(l_1_l, 'colour'))
            yield '"></i>'
            yield escape(environment.getattr(l_1_l, 'label'))
            yield '</span>'
        l_1_l = missing
        yield '</figcaption>\n  </figure>\n  <details>\n    <summary>Text version: lanes and collective windows ('
        yield escape(t_2(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'timeline'), 'windows')))
        yield ')</summary>\n    <ul class="lanes-text">'
        for l_1_t in environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'timeline'), 'lanes_text'):
            _loop_vars = {}
            pass
            yield '<li>'
            yield escape(l_1_t)
            yield '</li>'
        l_1_t = missing
        yield '</ul>'
        if environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'timeline'), 'windows'):
            pass
            yield '\n    <table class="data compact sortable">\n      <thead><tr><th scope="col" data-sort="n"><button type="button">Start ms</button></th><th scope="col" data-sort="n"><button type="button">Window ms</button></th><th scope="col" data-sort="t"><button type="button">Type</button></th><th scope="col" data-sort="t"><button type="button">Op</button></th><th scope="col" data-sort="n"><button type="button">Hidden</button></th><th scope="col" data-sort="t"><button type="button">Class</button></th></tr></thead>\n      <tbody>'
            for l_1_w in environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'timeline'), 'windows'):
                _loop_vars = {}
                pass
                yield '<tr><td class="num">'
                yield escape(environment.getattr(l_1_w, 'start_ms'))
                yield '</td><td class="num">'
                yield escape(environment.getattr(l_1_w, 'window_ms'))
                yield '</td><td>'
                yield escape(environment.getattr(l_1_w, 'type'))
                yield '</td><td class="op" title="'
                yield escape(environment.getattr(l_1_w, 'name_full'))
                yield '">'
                yield escape(environment.getattr(l_1_w, 'name'))
                yield '</td><td class="num">'
                yield escape(environment.getattr(l_1_w, 'hidden_pct'))
                yield '</td><td><span class="klass '
                yield escape(environment.getattr(l_1_w, 'klass'))
                yield '">'
                yield escape(environment.getattr(l_1_w, 'klass'))
                yield '</span></td></tr>'
            l_1_w = missing
            yield '\n      </tbody>\n    </table>'
        yield '\n  </details>'
    else:
        pass
        yield '\n  <p class="empty">No kept step to draw.</p>'
    yield '\n</section>\n\n<section id="communication" aria-labelledby="comm-h">\n  <h2 id="comm-h">Communication <span class="h-sub">exposed '
    yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'comm'), 'exposed_ms'))
    yield ' ms/step ('
    yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'comm'), 'exposed_pct'))
    yield ')</span></h2>\n  <div class="verdict tone-'
    yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'comm'), 'verdict_tone'))
    yield '" id="sc-verdict" data-verdict="'
    yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'comm'), 'verdict'))
    yield '">\n    <div class="verdict-h">SparseCore collective offload: <b>'
    yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'comm'), 'verdict_label'))
    yield '</b></div>\n    <p>'
    yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'comm'), 'verdict_reason'))
    yield '</p>\n    <dl class="facts inline">'
    for l_1_f in environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'comm'), 'sc_facts'):
        _loop_vars = {}
        pass
        yield '<div><dt>'
        yield escape(environment.getattr(l_1_f, 'label'))
        yield '</dt><dd>'
        yield escape(environment.getattr(l_1_f, 'value'))
        yield '</dd></div>'
    l_1_f = missing
    yield '</dl>\n  </div>'
    if environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'comm'), 'rows'):
        pass
        yield '\n  <table class="data" id="collective-table">\n    <caption>Per collective type, per step per TensorCore. Windows from '
        yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'comm'), 'window_source'))
        yield '. Hidden = TensorCore compute inside the windows; exposed = the collective\'s own bucket.</caption>\n    <thead><tr><th scope="col">Type</th><th scope="col">Engine</th><th scope="col" class="num">Windows</th><th scope="col" class="num">Window ms</th><th scope="col" class="num">Hidden ms</th><th scope="col" class="num">Exposed ms</th><th scope="col" class="num">Hidden</th><th scope="col" class="num">Exposed / step</th><th scope="col" class="barcol">hidden vs exposed</th></tr></thead>\n    <tbody>'
        for l_1_c in environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'comm'), 'rows'):
            _loop_vars = {}
            pass
            yield '\n      <tr data-type="'
            yield escape(environment.getattr(l_1_c, 'type'))
            yield '"><th scope="row"'
            if environment.getattr(l_1_c, 'scopes'):
                pass
                yield ' title="most exposed in: '
                yield escape(environment.getattr(l_1_c, 'scopes'))
                yield '"'
            yield '>'
            yield escape(environment.getattr(l_1_c, 'label'))
            yield '</th><td>'
            yield escape(environment.getattr(l_1_c, 'engine'))
            yield '</td><td class="num">'
            yield escape(environment.getattr(l_1_c, 'count'))
            yield '</td><td class="num">'
            yield escape(environment.getattr(l_1_c, 'window_ms'))
            yield '</td><td class="num">'
            yield escape(environment.getattr(l_1_c, 'hidden_ms'))
            yield '</td><td class="num exposed">'
            yield escape(environment.getattr(l_1_c, 'exposed_ms'))
            yield '</td><td class="num">'
            yield escape(environment.getattr(l_1_c, 'hidden_pct'))
            yield '</td><td class="num">'
            yield escape(environment.getattr(l_1_c, 'step_pct'))
            yield '</td>\n        <td class="barcol"><span class="hbar split" title="hidden '
            yield escape(environment.getattr(l_1_c, 'hidden_ms'))
            yield ' ms, exposed '
            yield escape(environment.getattr(l_1_c, 'exposed_ms'))
            yield ' ms"><i class="hid" style="width:'
            yield escape(environment.getattr(l_1_c, 'hidden_bar'))
            yield '"></i><i class="exp" style="width:'
            yield escape(environment.getattr(l_1_c, 'exposed_bar'))
            yield '"></i></span></td></tr>'
        l_1_c = missing
        yield '\n    </tbody>\n  </table>\n  <p class="legend"><span class="lg"><i class="hid"></i>hidden under compute</span><span class="lg"><i class="exp"></i>exposed (core waits)</span>'
        if (environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'comm'), 'a2a_share') != '0.0%'):
            pass
            yield '<span class="muted">All-to-all share of exposed communication: '
            yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'comm'), 'a2a_share'))
            yield '.</span>'
        yield '</p>'
    else:
        pass
        yield '\n  <p class="empty">No collectives in the kept steps.</p>'
    if environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'comm'), 'unmatched'):
        pass
        yield '<p class="note">'
        yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'comm'), 'unmatched'))
        yield '</p>'
    if environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'comm'), 'top_exposed'):
        pass
        yield '\n  <details open>\n    <summary>Most exposed collective windows ('
        yield escape(t_2(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'comm'), 'top_exposed')))
        yield ')</summary>\n    <table class="data compact sortable" id="exposed-table">\n      <thead><tr><th scope="col" data-sort="t"><button type="button">Core</button></th><th scope="col" data-sort="n"><button type="button">Step</button></th><th scope="col" data-sort="t"><button type="button">Type</button></th><th scope="col" data-sort="t"><button type="button">Op</button></th><th scope="col" data-sort="t"><button type="button">Engine</button></th><th scope="col" data-sort="n"><button type="button">At</button></th><th scope="col" data-sort="n"><button type="button">Window ms</button></th><th scope="col" data-sort="n"><button type="button">Exposed ms</button></th><th scope="col" data-sort="n"><button type="button">Hidden</button></th><th scope="col" data-sort="t"><button type="button">Class</button></th></tr></thead>\n      <tbody>'
        for l_1_w in environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'comm'), 'top_exposed'):
            _loop_vars = {}
            pass
            yield '<tr><td>'
            yield escape(environment.getattr(l_1_w, 'core'))
            yield '</td><td class="num">'
            yield escape(environment.getattr(l_1_w, 'step'))
            yield '</td><td>'
            yield escape(environment.getattr(l_1_w, 'type'))
            yield '</td><td class="op" title="'
            yield escape(environment.getattr(l_1_w, 'name_full'))
            yield '">'
            yield escape(environment.getattr(l_1_w, 'name'))
            yield '</td><td>'
            yield escape(environment.getattr(l_1_w, 'engine'))
            yield '</td><td class="num">'
            yield escape(environment.getattr(l_1_w, 'offset_pct'))
            yield '</td><td class="num">'
            yield escape(environment.getattr(l_1_w, 'window_ms'))
            yield '</td><td class="num">'
            yield escape(environment.getattr(l_1_w, 'exposed_ms'))
            yield '</td><td class="num">'
            yield escape(environment.getattr(l_1_w, 'hidden_pct'))
            yield '</td><td><span class="klass '
            yield escape(environment.getattr(l_1_w, 'klass'))
            yield '">'
            yield escape(environment.getattr(l_1_w, 'klass'))
            yield '</span></td></tr>'
        l_1_w = missing
        yield '\n      </tbody>\n    </table>\n  </details>'
    yield '\n</section>'
    def macro(l_1_rows, l_1_id, l_1_full):
        t_3 = []
        if l_1_rows is missing:
            l_1_rows = undefined("parameter 'rows' was not provided", name='rows')
        if l_1_id is missing:
            l_1_id = undefined("parameter 'id' was not provided", name='id')
        if l_1_full is missing:
            l_1_full = False
        pass
        t_3.extend((
            '\n<table class="data sortable ops" id="',
            escape(l_1_id),
            '">\n  <thead><tr>\n    <th scope="col" data-sort="n" class="num"><button type="button">#</button></th>\n    <th scope="col" data-sort="t"><button type="button">Op</button></th>\n    <th scope="col" data-sort="t"><button type="button">Bucket</button></th>\n    <th scope="col" data-sort="n" class="num" aria-sort="descending"><button type="button">Self ms/step</button></th>\n    <th scope="col" data-sort="n" class="num"><button type="button">Share</button></th>\n    <th scope="col" data-sort="n" class="num"><button type="button">Count</button></th>',
        ))
        if l_1_full:
            pass
            t_3.append(
                '\n    <th scope="col" data-sort="n" class="num"><button type="button">FLOP/B</button></th>\n    <th scope="col" data-sort="n" class="num"><button type="button">TFLOP/s</button></th>\n    <th scope="col" data-sort="n" class="num"><button type="button">GB/s</button></th>\n    <th scope="col" data-sort="t"><button type="button">Bound</button></th>\n    <th scope="col" data-sort="n" class="num"><button type="button">Roofline</button></th>',
            )
        t_3.append(
            '\n    <th scope="col" data-sort="t"><button type="button">Tags</button></th>\n  </tr></thead>\n  <tbody>',
        )
        for l_2_o in l_1_rows:
            _loop_vars = {}
            pass
            t_3.extend((
                '\n    <tr data-bucket="',
                escape(environment.getattr(l_2_o, 'bucket')),
                '"><td class="num" data-v="',
                escape(environment.getattr(l_2_o, 'rank')),
                '">',
                escape(environment.getattr(l_2_o, 'rank')),
                '</td><td class="op" title="',
                escape(environment.getattr(l_2_o, 'name_full')),
            ))
            if environment.getattr(l_2_o, 'tf_op'):
                pass
                t_3.extend((
                    ' — ',
                    escape(environment.getattr(l_2_o, 'tf_op')),
                ))
            t_3.extend((
                '">',
                escape(environment.getattr(l_2_o, 'name')),
                '</td><td><i class="sw" style="background:',
                escape(environment.getattr(l_2_o, 'colour')),
                '"></i>',
                escape(environment.getattr(l_2_o, 'bucket_label')),
                '</td><td class="num" data-v="',
                escape(environment.getattr(l_2_o, 'ps')),
                '">',
                escape(environment.getattr(l_2_o, 'ms')),
                '</td><td class="num" data-v="',
                escape(environment.getattr(l_2_o, 'ps')),
                '">',
                escape(environment.getattr(l_2_o, 'pct')),
                '</td><td class="num" data-v="',
                escape(environment.getattr(l_2_o, 'count_v')),
                '">',
                escape(environment.getattr(l_2_o, 'count')),
                '</td>',
            ))
            if l_1_full:
                pass
                t_3.extend((
                    '<td class="num" data-v="',
                    escape(environment.getattr(l_2_o, 'intensity_v')),
                    '">',
                    escape(environment.getattr(l_2_o, 'intensity')),
                    '</td><td class="num" data-v="',
                    escape(environment.getattr(l_2_o, 'tflops_v')),
                    '">',
                    escape(environment.getattr(l_2_o, 'tflops')),
                    '</td><td class="num" data-v="',
                    escape(environment.getattr(l_2_o, 'gbps_v')),
                    '">',
                    escape(environment.getattr(l_2_o, 'gbps')),
                    '</td><td>',
                    escape(environment.getattr(l_2_o, 'bound')),
                    '</td><td class="num" data-v="',
                    escape(environment.getattr(l_2_o, 'roof_v')),
                    '">',
                    escape(environment.getattr(l_2_o, 'roof')),
                    '</td>',
                ))
            t_3.extend((
                '<td class="tags">',
                escape(environment.getattr(l_2_o, 'tags')),
                '</td></tr>',
            ))
        l_2_o = missing
        t_3.append(
            '\n  </tbody>\n</table>',
        )
        return concat(t_3)
    context.exported_vars.add('op_table')
    context.vars['op_table'] = l_0_op_table = Macro(environment, macro, 'op_table', ('rows', 'id', 'full'), False, False, False, context.eval_ctx.autoescape)
    yield '\n\n<section id="remat" aria-labelledby="remat-h">\n  <h2 id="remat-h">Remat <span class="h-sub">recompute '
    yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'remat'), 'ms'))
    yield ' ms/step ('
    yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'remat'), 'pct'))
    yield ')</span></h2>'
    if environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'remat'), 'ops'):
        pass
        yield escape(context.call((undefined(name='op_table') if l_0_op_table is missing else l_0_op_table), environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'remat'), 'ops'), 'remat-ops'))
    else:
        pass
        yield '<p class="empty">'
        yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'remat'), 'note'))
        yield '</p>'
    yield '\n</section>\n<section id="attention" aria-labelledby="attn-h">\n  <h2 id="attn-h">Attention <span class="h-sub">'
    yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'attention'), 'ms'))
    yield ' ms/step ('
    yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'attention'), 'pct'))
    yield ')</span></h2>'
    if environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'attention'), 'facts'):
        pass
        yield '<dl class="facts inline">'
        for l_1_f in environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'attention'), 'facts'):
            _loop_vars = {}
            pass
            yield '<div><dt>'
            yield escape(environment.getattr(l_1_f, 'label'))
            yield '</dt><dd>'
            yield escape(environment.getattr(l_1_f, 'value'))
            yield '</dd></div>'
        l_1_f = missing
        yield '</dl>'
    if environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'attention'), 'ops'):
        pass
        yield escape(context.call((undefined(name='op_table') if l_0_op_table is missing else l_0_op_table), environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'attention'), 'ops'), 'attention-ops'))
    else:
        pass
        yield '<p class="empty">'
        yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'attention'), 'note'))
        yield '</p>'
    yield '\n</section>\n\n<section id="roofline" aria-labelledby="roof-h">\n  <h2 id="roof-h">Roofline <span class="h-sub">top ops against the chip\'s roofs</span></h2>\n  <dl class="facts inline">'
    for l_1_f in environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'roofline'), 'facts'):
        _loop_vars = {}
        pass
        yield '<div><dt>'
        yield escape(environment.getattr(l_1_f, 'label'))
        yield '</dt><dd>'
        yield escape(environment.getattr(l_1_f, 'value'))
        yield '</dd></div>'
    l_1_f = missing
    yield '</dl>'
    if environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'roofline'), 'chart'):
        pass
        yield '\n  <figure>'
        yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'roofline'), 'chart'))
        yield '<figcaption class="muted">'
        yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'roofline'), 'caption'))
        yield ' '
        yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'roofline'), 'unplotted'))
        yield '</figcaption></figure>'
    else:
        pass
        yield '\n  <p class="empty">'
        yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'roofline'), 'caption'))
        yield ' '
        yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'roofline'), 'unplotted'))
        yield '</p>'
    yield '\n</section>\n\n<section id="top-ops" aria-labelledby="ops-h">\n  <h2 id="ops-h">Top ops <span class="h-sub">click a column header to sort</span></h2>\n  <p class="muted">'
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'top_ops_note'))
    yield '</p>\n  <div class="scroll">'
    yield escape(context.call((undefined(name='op_table') if l_0_op_table is missing else l_0_op_table), environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'top_ops'), 'top-ops-table', full=True))
    yield '</div>\n</section>\n\n<section id="cores" aria-labelledby="cores-h">\n  <h2 id="cores-h">Per-core spread <span class="h-sub">'
    if environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'cores'), 'stragglers'):
        pass
        yield escape(t_2(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'cores'), 'stragglers')))
        yield ' straggler core'
        yield escape(('s' if (t_2(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'cores'), 'stragglers')) != 1) else cond_expr_undefined("the inline if-expression on line 282 in 'report.html.j2' evaluated to false and no else section was defined.")))
    else:
        pass
        yield 'no straggler cores'
    yield '</span></h2>\n  <p id="core-spread">'
    yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'cores'), 'spread'))
    if environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'cores'), 'stragglers'):
        pass
        yield ' <b class="bad-t">Stragglers: '
        yield escape(t_1(context.eval_ctx, environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'cores'), 'stragglers'), ', '))
        yield '.</b>'
    yield '</p>'
    if environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'cores'), 'chart'):
        pass
        yield '<figure>'
        yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'cores'), 'chart'))
        yield '</figure>'
    yield '\n  <details'
    if (not environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'cores'), 'folded')):
        pass
        yield ' open'
    yield '>\n    <summary>Per-core table ('
    yield escape(t_2(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'cores'), 'rows')))
    yield ' TensorCores)</summary>\n    <table class="data compact sortable" id="core-table">\n      <caption>'
    yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'cores'), 'rule'))
    yield '</caption>\n      <thead><tr><th scope="col" data-sort="t"><button type="button">Core</button></th><th scope="col" data-sort="n" class="num"><button type="button">Steps</button></th><th scope="col" data-sort="n" class="num"><button type="button">Step ms</button></th><th scope="col" data-sort="n" class="num"><button type="button">Busy ms</button></th><th scope="col" data-sort="n" class="num"><button type="button">Compute ms</button></th><th scope="col" data-sort="n" class="num"><button type="button">Exposed comm ms</button></th><th scope="col" data-sort="n" class="num"><button type="button">Idle</button></th><th scope="col" data-sort="n" class="num"><button type="button">z</button></th><th scope="col" data-sort="t"><button type="button">Straggler</button></th></tr></thead>\n      <tbody>'
    for l_1_c in environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'cores'), 'rows'):
        _loop_vars = {}
        pass
        yield '<tr'
        if environment.getattr(l_1_c, 'straggler'):
            pass
            yield ' class="straggler-row"'
        yield '><td>'
        yield escape(environment.getattr(l_1_c, 'core'))
        yield '</td><td class="num">'
        yield escape(environment.getattr(l_1_c, 'steps_kept'))
        yield '</td><td class="num">'
        yield escape(environment.getattr(l_1_c, 'step_ms'))
        yield '</td><td class="num">'
        yield escape(environment.getattr(l_1_c, 'busy_ms'))
        yield '</td><td class="num">'
        yield escape(environment.getattr(l_1_c, 'compute_ms'))
        yield '</td><td class="num">'
        yield escape(environment.getattr(l_1_c, 'comm_ms'))
        yield '</td><td class="num">'
        yield escape(environment.getattr(l_1_c, 'idle_pct'))
        yield '</td><td class="num">'
        yield escape(environment.getattr(l_1_c, 'z'))
        yield '</td><td>'
        yield escape(('yes' if environment.getattr(l_1_c, 'straggler') else ''))
        yield '</td></tr>'
    l_1_c = missing
    yield '\n      </tbody>\n    </table>\n  </details>\n</section>\n\n</main>\n<footer id="footer">\n  <div>profanalyze <span id="tool-version">'
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'tool_version'))
    yield '</span>'
    if environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'timestamp'):
        pass
        yield ' · generated <span id="timestamp">'
        yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'timestamp'))
        yield '</span>'
    yield '</div>\n  <div>Command: <code id="command-line">'
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'command_line'))
    yield '</code></div>\n  <div>Input SHA-256: <code id="input-sha256">'
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'input_sha256'))
    yield '</code></div>\n</footer>\n<script>\n'
    template = environment.get_template('_script.html.j2', 'report.html.j2')
    gen = template.root_render_func(template.new_context(context.get_all(), True, {'op_table': l_0_op_table}))
    try:
        for event in gen:
            yield event
    finally: gen.close()
    yield '\n</script>\n</body>\n</html>\n'

blocks = {}
debug_info = '9=26&10=28&12=30&18=37&19=39&21=43&29=53&31=55&32=59&33=63&34=65&35=67&40=71&42=73&45=83&46=86&50=89&51=93&55=111&56=115&59=123&61=129&63=139&71=147&72=150&73=160&75=166&76=169&78=181&79=191&80=195&82=203&84=205&86=207&87=209&88=211&89=213&93=215&94=217&95=219&101=221&102=229&104=232&106=240&110=246&113=248&115=251&117=253&118=255&119=257&129=262&131=264&133=266&137=276&139=280&146=294&147=298&151=319&152=321&159=329&167=341&168=344&170=350&172=352&176=362&177=364&178=372&182=375&193=402&194=406&195=410&196=412&197=414&199=424&201=427&204=429&205=433&206=457&210=467&214=476&215=481&217=484&221=486&228=517&229=528&237=531&247=539&248=544&249=579&256=615&257=619&260=628&261=632&262=645&267=654&268=664&269=667&271=676&277=681&278=683&282=685&283=694&284=701&285=707&286=711&288=713&291=715&299=743&300=751&301=753&304=755'