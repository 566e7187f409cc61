from jinja2.runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'fleet.html.j2'

def root(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    l_0_r = resolve('r')
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
    template = environment.get_template('_styles.html.j2', 'fleet.html.j2')
    gen = template.root_render_func(template.new_context(context.get_all(), True, {}))
    try:
        for event in gen:
            yield event
    finally: gen.close()
    yield '\n'
    template = environment.get_template('fleet_styles.html.j2', 'fleet.html.j2')
    gen = template.root_render_func(template.new_context(context.get_all(), True, {}))
    try:
        for event in gen:
            yield event
    finally: gen.close()
    yield '\n</style>\n</head>\n<body>\n<header class="topbar">\n  <div class="topbar-in">\n    <div class="brand">profanalyze fleet<span class="ver">'
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'tool_version'))
    yield '</span></div>\n    <nav aria-label="Sections">'
    for l_1_n in environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'nav'):
        _loop_vars = {}
        pass
        yield '<a href="#'
        yield escape(environment.getattr(l_1_n, 'id'))
        yield '">'
        yield escape(environment.getattr(l_1_n, 'label'))
        yield '</a>'
    l_1_n = missing
    yield '</nav>\n  </div>\n</header>\n<main>\n\n<section id="summary" class="summary" aria-labelledby="summary-h">\n  <h1 id="summary-h">Fleet: runs and hosts</h1>\n  <p class="headline" id="headline">'
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
    yield '\n  </div>\n  <div class="facts-row">\n    <dl class="facts">'
    for l_1_f in environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'facts'):
        _loop_vars = {}
        pass
        yield '\n      <div><dt>'
        yield escape(environment.getattr(l_1_f, 'label'))
        yield '</dt><dd>'
        yield escape(environment.getattr(l_1_f, 'value'))
        yield '</dd></div>'
    l_1_f = missing
    yield '\n    </dl>\n    <div class="defs">\n      <details>\n        <summary>Definitions</summary>\n        <dl class="deflist">'
    for l_1_d in environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'definitions'):
        _loop_vars = {}
        pass
        yield '<dt>'
        yield escape(environment.getattr(l_1_d, 'label'))
        yield '</dt><dd>'
        yield escape(environment.getattr(l_1_d, 'value'))
        yield '</dd>'
    l_1_d = missing
    yield '</dl>\n      </details>\n    </div>\n  </div>\n</section>\n\n<section id="trend" aria-labelledby="trend-h">\n  <h2 id="trend-h">Trend across runs <span class="h-sub">sorted by run time; mean over each run\'s analysed hosts</span></h2>'
    if environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'trend'), 'chart'):
        pass
        yield '\n  <figure>\n    '
        yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'trend'), 'chart'))
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
        yield '<span class="lg"><i class="sw reg-sw"></i>regressed</span>\n    </figcaption>\n  </figure>'
    else:
        pass
        yield '\n  <p class="empty">No run has an analysed host.</p>'
    if environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'trend'), 'first'):
        pass
        yield '\n  <h3>First run where each metric regressed</h3>\n  <ul id="first-regressions">'
        for l_1_g in environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'trend'), 'first'):
            _loop_vars = {}
            pass
            yield '<li><b>'
            yield escape(environment.getattr(l_1_g, 'metric'))
            yield '</b> at '
            if environment.getattr(l_1_g, 'anchor'):
                pass
                yield '<a href="#'
                yield escape(environment.getattr(l_1_g, 'anchor'))
                yield '">'
                yield escape(environment.getattr(l_1_g, 'run'))
                yield '</a>'
            else:
                pass
                yield escape(environment.getattr(l_1_g, 'run'))
            yield ': '
            yield escape(environment.getattr(l_1_g, 'text'))
            yield '</li>'
        l_1_g = missing
        yield '\n  </ul>'
    else:
        pass
        yield '\n  <p class="muted" id="first-regressions">No regression.</p>'
    yield '\n  <details'
    if (t_2(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'trend'), 'rows')) <= 40):
        pass
        yield ' open'
    yield '>\n  <summary>Trend table ('
    yield escape(t_2(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'trend'), 'rows')))
    yield ' run'
    yield escape(('s' if (t_2(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'trend'), 'rows')) != 1) else cond_expr_undefined("the inline if-expression on line 78 in 'fleet.html.j2' evaluated to false and no else section was defined.")))
    yield ')</summary>\n  <div class="scroll">\n    <table class="data compact sortable" id="trend-table">\n      <caption>ms per step. '
    yield escape(environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'trend'), 'rule'))
    yield '</caption>\n      <thead><tr><th scope="col" data-sort="t"><button type="button">Run</button></th><th scope="col" data-sort="t"><button type="button">Time</button></th><th scope="col" data-sort="n" class="num"><button type="button">Hosts</button></th>'
    for l_1_c in environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'trend'), 'columns'):
        _loop_vars = {}
        pass
        yield '<th scope="col" data-sort="n" class="num"><button type="button">'
        yield escape(l_1_c)
        yield '</button></th>'
    l_1_c = missing
    yield '</tr></thead>\n      <tbody>'
    for l_1_t in environment.getattr(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'trend'), 'rows'):
        _loop_vars = {}
        pass
        yield '<tr'
        if environment.getattr(l_1_t, 'regressed'):
            pass
            yield ' class="regressed-row"'
        yield '><th scope="row">'
        if environment.getattr(l_1_t, 'anchor'):
            pass
            yield '<a href="#'
            yield escape(environment.getattr(l_1_t, 'anchor'))
            yield '">'
            yield escape(environment.getattr(l_1_t, 'run'))
            yield '</a>'
        else:
            pass
            yield escape(environment.getattr(l_1_t, 'run'))
        yield '</th><td class="time">'
        yield escape(environment.getattr(l_1_t, 'time'))
        yield '</td><td class="num">'
        yield escape(environment.getattr(l_1_t, 'hosts'))
        yield '</td>'
        for l_2_c in environment.getattr(l_1_t, 'cells'):
            _loop_vars = {}
            pass
            yield '<td class="num'
            if environment.getattr(l_2_c, 'flag'):
                pass
                yield ' reg'
            yield '" data-v="'
            yield escape(environment.getattr(l_2_c, 'value'))
            yield '"'
            if environment.getattr(l_2_c, 'tip'):
                pass
                yield ' title="'
                yield escape(environment.getattr(l_2_c, 'tip'))
                yield '"'
            yield '>'
            yield escape(environment.getattr(l_2_c, 'text'))
            if environment.getattr(l_2_c, 'flag'):
                pass
                yield ' ▲'
            yield '</td>'
        l_2_c = missing
        yield '</tr>'
    l_1_t = missing
    yield '\n      </tbody>\n    </table>\n  </div>\n  </details>\n</section>\n\n<section id="runs" aria-labelledby="runs-h">\n  <h2 id="runs-h">Pod view per run <span class="h-sub">'
    yield escape(t_2(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'runs')))
    yield ' run'
    yield escape(('s' if (t_2(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'runs')) != 1) else cond_expr_undefined("the inline if-expression on line 95 in 'fleet.html.j2' evaluated to false and no else section was defined.")))
    yield ', oldest first</span></h2>'
    for l_1_run in environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'runs'):
        _loop_vars = {}
        pass
        yield '\n  <article class="run" id="'
        yield escape(environment.getattr(l_1_run, 'id'))
        yield '" aria-labelledby="'
        yield escape(environment.getattr(l_1_run, 'id'))
        yield '-h">\n    <h3 id="'
        yield escape(environment.getattr(l_1_run, 'id'))
        yield '-h">'
        yield escape(environment.getattr(l_1_run, 'name'))
        if environment.getattr(l_1_run, 'stragglers'):
            pass
            yield ' <span class="chip bad-chip">'
            yield escape(t_2(environment.getattr(l_1_run, 'stragglers')))
            yield ' straggler'
            yield escape(('s' if (t_2(environment.getattr(l_1_run, 'stragglers')) != 1) else cond_expr_undefined("the inline if-expression on line 98 in 'fleet.html.j2' evaluated to false and no else section was defined.")))
            yield '</span>'
        if environment.getattr(l_1_run, 'failed'):
            pass
            yield ' <span class="chip bad-chip">'
            yield escape(environment.getattr(l_1_run, 'failed'))
            yield ' failed</span>'
        yield '</h3>\n    <dl class="facts inline">'
        for l_2_f in environment.getattr(l_1_run, 'facts'):
            _loop_vars = {}
            pass
            yield '<div><dt>'
            yield escape(environment.getattr(l_2_f, 'label'))
            yield '</dt><dd>'
            yield escape(environment.getattr(l_2_f, 'value'))
            yield '</dd></div>'
        l_2_f = missing
        yield '\n    </dl>'
        if environment.getattr(l_1_run, 'critical'):
            pass
            yield '<p class="critical"><b>Slowest host\'s critical bucket:</b> '
            yield escape(environment.getattr(l_1_run, 'critical'))
            yield '</p>'
        if environment.getattr(l_1_run, 'stragglers'):
            pass
            yield '<p class="bad-t stragglers">Straggler hosts: '
            yield escape(t_1(context.eval_ctx, environment.getattr(l_1_run, 'stragglers'), ', '))
            yield '</p>'
        if environment.getattr(l_1_run, 'chart'):
            pass
            yield '<figure>'
            yield escape(environment.getattr(l_1_run, 'chart'))
            yield '</figure>'
        yield '\n    <details'
        if environment.getattr(l_1_run, 'open'):
            pass
            yield ' open'
        yield '>\n      <summary>Per-host table ('
        yield escape(t_2(environment.getattr(l_1_run, 'rows')))
        yield ' host file'
        yield escape(('s' if (t_2(environment.getattr(l_1_run, 'rows')) != 1) else cond_expr_undefined("the inline if-expression on line 106 in 'fleet.html.j2' evaluated to false and no else section was defined.")))
        yield ')</summary>\n      <div class="scroll">\n      <table class="data compact sortable host-table">\n        <caption>ms per step. Stragglers: '
        yield escape(environment.getattr(l_1_run, 'check'))
        yield '.</caption>\n        <thead><tr><th scope="col" data-sort="t"><button type="button">Host</button></th><th scope="col" data-sort="n" class="num"><button type="button">Steps</button></th><th scope="col" data-sort="n" class="num"><button type="button">Step ms</button></th><th scope="col" data-sort="n" class="num"><button type="button">Step z</button></th><th scope="col" data-sort="n" class="num"><button type="button">Idle + exposed comm ms</button></th><th scope="col" data-sort="n" class="num"><button type="button">Wait z</button></th>'
        for l_2_c in environment.getattr(l_1_run, 'columns'):
            _loop_vars = {}
            pass
            yield '<th scope="col" data-sort="n" class="num"><button type="button">'
            yield escape(l_2_c)
            yield '</button></th>'
        l_2_c = missing
        yield '<th scope="col" data-sort="n" class="num"><button type="button">MFU</button></th><th scope="col" data-sort="t"><button type="button">Notes</button></th><th scope="col" data-sort="t"><button type="button">Top recommendation</button></th></tr></thead>\n        <tbody>'
        for l_2_h in environment.getattr(l_1_run, 'rows'):
            _loop_vars = {}
            pass
            yield '<tr class="'
            if environment.getattr(l_2_h, 'straggler'):
                pass
                yield 'straggler-row'
            if (not environment.getattr(l_2_h, 'ok')):
                pass
                yield ' failed-row'
            yield '"><th scope="row" title="'
            yield escape(environment.getattr(l_2_h, 'path'))
            yield '">'
            yield escape(environment.getattr(l_2_h, 'host'))
            yield '</th><td class="num">'
            yield escape(environment.getattr(l_2_h, 'steps'))
            yield '</td><td class="num" data-v="'
            yield escape(environment.getattr(l_2_h, 'step_v'))
            yield '">'
            yield escape(environment.getattr(l_2_h, 'step_ms'))
            yield '</td><td class="num">'
            yield escape(environment.getattr(l_2_h, 'step_z'))
            yield '</td><td class="num">'
            yield escape(environment.getattr(l_2_h, 'wait_ms'))
            yield '</td><td class="num">'
            yield escape(environment.getattr(l_2_h, 'wait_z'))
            yield '</td>'
            for l_3_c in environment.getattr(l_2_h, 'cells'):
                _loop_vars = {}
                pass
                yield '<td class="num'
                if environment.getattr(l_3_c, 'flag'):
                    pass
                    yield ' crit'
                yield '" data-v="'
                yield escape(environment.getattr(l_3_c, 'value'))
                yield '">'
                yield escape(environment.getattr(l_3_c, 'text'))
                yield '</td>'
            l_3_c = missing
            yield '<td class="num">'
            yield escape(environment.getattr(l_2_h, 'mfu'))
            yield '</td><td class="notes">'
            yield escape(environment.getattr(l_2_h, 'note'))
            yield '</td><td class="top" title="'
            yield escape(environment.getattr(l_2_h, 'top_tip'))
            yield '">'
            yield escape(environment.getattr(l_2_h, 'top'))
            yield '</td></tr>'
        l_2_h = missing
        yield '\n        </tbody>\n      </table>\n      </div>\n    </details>\n  </article>'
    l_1_run = missing
    yield '\n</section>\n\n<section id="failures" aria-labelledby="failures-h">\n  <h2 id="failures-h">Failures <span class="h-sub">files and paths that could not be analysed; the others completed</span></h2>'
    if environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'failures'):
        pass
        yield '\n  <div class="scroll">\n  <table class="data compact" id="failure-table">\n    <thead><tr><th scope="col">Path</th><th scope="col">Run</th><th scope="col">Host</th><th scope="col">Error</th></tr></thead>\n    <tbody>'
        for l_1_f in environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'failures'):
            _loop_vars = {}
            pass
            yield '<tr><td class="op">'
            yield escape(environment.getattr(l_1_f, 'path'))
            yield '</td><td>'
            yield escape(environment.getattr(l_1_f, 'run'))
            yield '</td><td>'
            yield escape(environment.getattr(l_1_f, 'host'))
            yield '</td><td class="err" title="'
            yield escape(environment.getattr(l_1_f, 'error_type'))
            yield '">'
            yield escape(environment.getattr(l_1_f, 'error'))
            yield '</td></tr>'
        l_1_f = missing
        yield '\n    </tbody>\n  </table>\n  </div>'
    else:
        pass
        yield '\n  <p class="muted">None: every host file was analysed.</p>'
    yield '\n</section>\n\n</main>\n<footer id="footer">\n  <div>profanalyze <span id="tool-version">'
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'tool_version'))
    yield '</span>'
    if environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'timestamp'):
        pass
        yield ' · generated <span id="timestamp">'
        yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'timestamp'))
        yield '</span>'
    yield '</div>\n  <div>Command: <code id="command-line">'
    yield escape(environment.getattr((undefined(name='r') if l_0_r is missing else l_0_r), 'command_line'))
    yield '</code></div>\n</footer>\n<script>\n'
    template = environment.get_template('_script.html.j2', 'fleet.html.j2')
    gen = template.root_render_func(template.new_context(context.get_all(), True, {}))
    try:
        for event in gen:
            yield event
    finally: gen.close()
    yield '\n</script>\n</body>\n</html>\n'

blocks = {}
debug_info = '9=25&10=27&12=29&13=36&19=43&21=45&29=55&31=57&32=61&33=65&34=67&35=69&41=73&42=77&49=83&58=93&60=96&62=98&69=111&72=114&77=139&78=143&81=147&83=149&85=157&86=180&95=205&96=209&97=213&98=217&100=233&102=243&103=248&104=253&105=259&106=263&109=267&111=269&113=277&114=304&126=330&131=333&142=353&143=361&146=363'