"""The report page's stylesheet and script (inline in the page; nothing is fetched).

The script reads the data block (`page_data`: JSON in `<script id="data" type="application/json">`), builds the
hosts' foldable boxes, draws a host's GPUs (SVG, commands, workloads) when the host is opened, and runs the filters,
the search and the sort over the overview's cells and the hosts. It writes only `textContent` and attributes: no
text of the plan is ever parsed as HTML. URL parameters: `?filter=changes|at-risk|left-out`, `?q=TEXT`,
`?sort=changes`, `?open=all`, and `#g<n>` opens GPU n (its place in the data block, as the overview links).

Every instance rectangle it draws carries `data-side` (current|target), `data-profile`, `data-start`,
`data-slices` and `data-workload`, and every memory bar `data-used` and `data-total` (MiB), so tests (and
people) can check the drawing against the plan.
"""

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#1f3b57;color:#fff;padding:12px 20px}header h1{margin:0;font-size:20px}
header .meta{margin:4px 0 0;color:#cfe0f0}main{padding:4px 20px 40px}
.bar{position:sticky;top:0;z-index:2;background:#eef2f6;border-bottom:1px solid #d5dbe1;padding:6px 20px;
display:flex;flex-wrap:wrap;gap:8px;align-items:center}.bar input{width:240px;padding:3px}
.filters button{border:1px solid #9aa7b4;background:#fff;padding:3px 9px;cursor:pointer;margin-right:-1px}
.filters button:first-child{border-radius:4px 0 0 4px}.filters button:last-child{border-radius:0 4px 4px 0}
.filters button[aria-pressed=true]{background:#1f3b57;color:#fff;border-color:#1f3b57}#count{color:#444}
details.sec{margin:10px 0}details.sec>summary{cursor:pointer;padding:2px 0}
details.sec>summary h2{display:inline;font-size:16px;margin:0}.meta{color:#666;font-size:12px;margin-left:6px}
table{border-collapse:collapse;background:#fff;margin:6px 0}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}th{background:#f0f3f6}
.warning{color:#a40;font-weight:600}
.legend{font-size:12px;color:#555;margin:4px 0}.legend span{margin-right:12px;white-space:nowrap}
.legend svg,.legend .cell{vertical-align:middle;margin-right:3px}.legend rect.inst{fill:#f2f2f2}
#grid{margin:6px 0;line-height:0}
.hg{display:inline-block;vertical-align:top;width:96px;margin:0 10px 6px 0}
.hn{display:block;font-size:9px;line-height:11px;color:#555;white-space:nowrap;overflow:hidden;
text-overflow:ellipsis}.hg.off .hn{color:#c4c4c4}
#grid a,.cell{display:inline-block;width:10px;height:10px;margin:0 2px 2px 0;border:1px solid #b8c2cc;
box-sizing:border-box;vertical-align:top}
.u0{background:#fff}.u1{background:#c6dbef}.u2{background:#9ecae1}.u3{background:#4292c6}.u4{background:#08519c}
#grid.big .hg{width:152px}#grid.big a{width:16px;height:16px;margin:0 3px 3px 0}
#grid.big .hn{font-size:11px;line-height:14px}
#grid a.x,.cell.x{border:2px solid #f08c00}.r,.l{position:relative}
.r::after{content:"";position:absolute;right:-2px;top:-2px;border-style:solid;
border-width:0 6px 6px 0;border-color:transparent #d7301f transparent transparent}
.l::before{content:"";position:absolute;left:0;bottom:0;width:5px;height:5px;border-radius:50%;background:#7b3294}
.k{background-image:repeating-linear-gradient(45deg,transparent 0 2px,#777 2px 3px)}
#grid a.off{background:#f3f4f5;border-color:#e4e7ea;background-image:none}
#grid a.off::before,#grid a.off::after{display:none}#grid a.sel{outline:2px solid #000;outline-offset:1px}
details.host{background:#fff;border:1px solid #d5dbe1;border-radius:6px;margin:6px 0;padding:0 10px;
content-visibility:auto;contain-intrinsic-size:auto 28px}
details.host>summary{cursor:pointer;height:28px;line-height:28px;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.gpu-row{scroll-margin-top:90px}
.gpu-row{border-top:1px solid #eee;padding:6px 0}.gpu-row.sel{background:#fff8e6}
.gpu-row h3{font-size:13px;margin:2px 0 4px}
.model{color:#555;font-weight:400}.state{font-size:11px;padding:1px 6px;border-radius:8px;background:#e8e8e8}
.state.change{background:#ffe2b8}.state.reserved,.state.excluded{background:#d9e6ff}
.gmem{font-weight:400;color:#555;font-size:12px;margin-left:8px}
.pair{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}figure{margin:0}
figcaption{font-size:11px;color:#666}.changes{font-size:12px;max-width:560px}
pre.cmds{margin:2px 0;font-size:12px;background:#f6f8fa;border:1px solid #e1e4e8;padding:4px 6px;
white-space:pre-wrap;word-break:break-all}.note{color:#8a5a00;margin:2px 0}
svg.gpu{display:block;background:#fff}rect.free{fill:#fff;stroke:#bbb;stroke-dasharray:3 2}
rect.inst{stroke:#555;stroke-width:1}rect.inst.created{stroke:#0a7d2c;stroke-width:2.5;stroke-dasharray:6 3}
rect.inst.destroyed{stroke:#c0262d;stroke-width:2.5;opacity:.75}rect.whole{stroke:#555}
rect.sm{fill:#36506b}rect.mem{fill:#fff;stroke:#777;stroke-width:.5}rect.memused{fill:#36506b}
rect.memused.over{fill:#c0262d}text{font-size:10px;fill:#111}text.prof{font-weight:600}
ul.wl{list-style:none;margin:4px 0;padding:0;font-size:12px;columns:2 320px}
.swatch{display:inline-block;width:10px;height:10px;border:1px solid #777;margin-right:4px}
.kept{color:#555}.moved,.at-risk{color:#a40;font-weight:600}.new{color:#0a7d2c;font-weight:600}.mem-text{color:#666}
code{font-size:12px}
"""

SCRIPT = r"""
(function(){
'use strict';
var D=JSON.parse(document.getElementById('data').textContent);
var H=D.hosts,M=D.models,G=D.gpus,NS='http://www.w3.org/2000/svg',SLOT=60,GAP=2,HT=58;
var CHANGED=1,AT_RISK=2,LEFT_OUT=4,RESERVED=8,EXCLUDED=16,MOVES=32,MARKS=['new','kept','moved','at-risk'];
var FILTERS={'changes':CHANGED,'at-risk':AT_RISK,'left-out':LEFT_OUT};
var grid=document.getElementById('grid'),cells=grid.getElementsByTagName('a'),groups=grid.children;
var box=document.getElementById('hosts'),q=document.getElementById('q'),sort=document.getElementById('sort');
var count=document.getElementById('count'),buttons=document.querySelectorAll('[data-filter]');
var byHost=H.map(function(){return [];}),hostEl=[],drawn=[],filter='all',term='',words=null;
G.forEach(function(g,n){byHost[g[0]].push(n);});

function el(tag,cls,text){var e=document.createElement(tag);if(cls)e.className=cls;
if(text!==undefined&&text!==null)e.textContent=text;return e;}
function sv(tag,a){var e=document.createElementNS(NS,tag);
Object.keys(a).forEach(function(k){e.setAttribute(k,a[k]);});return e;}
function num(x){return String(x).replace(/\B(?=(\d{3})+(?!\d))/g,',');}
function colour(name){var h=2166136261;for(var i=0;i<name.length;i++){h=Math.imul(h^name.charCodeAt(i),16777619)>>>0;}
return 'hsl('+(h%360)+', '+(55+Math.floor(h/360)%25)+'%, '+(72+Math.floor(h/9000)%10)+'%)';}
function insts(m,flat){if(!flat)return null;var out=[];for(var i=0;i<flat.length;i+=2){var p=M[m][5][flat[i]];
out.push({name:p[0],start:flat[i+1],ms:p[1],cs:p[2],mib:p[3],key:p[0]+'@'+flat[i+1]});}return out;}
function label(x,y,t,cls,w){var room=Math.max(1,Math.floor(w/6.2));
var e=sv('text',{x:Math.round(x),y:Math.round(y),'class':cls});
e.textContent=t.length<=room?t:t.slice(0,Math.max(1,room-1))+'\u2026';return e;}
function tip(t){var e=sv('title',{});e.textContent=t;return e;}
function bar(parent,x,y,w,used,total){
parent.appendChild(sv('rect',{'class':'mem',x:x,y:y,width:w,height:6}));
parent.appendChild(sv('rect',{'class':'memused'+(used>total?' over':''),x:x,y:y,
width:(w*(total?Math.min(1,used/total):1)).toFixed(1),height:6,'data-used':used,'data-total':total}));}

// the workloads on one side of a GPU: by instance position, and on the whole GPU (-1)
function onSide(n,side,lay){var g=G[n],out={},tgt=insts(g[2],g[5]);
function put(pos,w){(out[pos]||(out[pos]=[])).push(w);}
if(side==='target'){g[9].forEach(function(w){put(w[1],{name:w[0],peak:w[2],mib:w[4]});});return out;}
var at={};(lay||[]).forEach(function(i,k){at[i.key]=k;});
g[9].forEach(function(w){if(w[3]!==1&&w[3]!==3)return;
if(w[1]<0)put(-1,{name:w[0],peak:w[2],mib:w[4]});
else if(tgt&&at[tgt[w[1]].key]!==undefined)put(at[tgt[w[1]].key],{name:w[0],peak:w[2],mib:w[4]});});
g[10].forEach(function(w){put(w[1],{name:w[0],peak:w[2],mib:0});});return out;}

function svg(n,side){var g=G[n],m=M[g[2]],lay=insts(g[2],side==='current'?g[4]:g[5]);
var other=insts(g[2],side==='current'?g[5]:g[4]),width=m[2]*SLOT,ws=onSide(n,side,lay);
var s=sv('svg',{'class':'gpu','data-side':side,'data-slots':m[1],width:width,height:HT,
viewBox:'0 0 '+width+' '+HT,role:'img','aria-label':H[g[0]]+' GPU '+g[1]+' '+side});
if(!lay){var whole=ws[-1]||[],names=whole.map(function(w){return w.name;}).join(', ');
var text=names||(m[3]?'MIG disabled (whole GPU)':D.nomig),grp=sv('g',{'class':'whole'});
var used=0,total=m[4];whole.forEach(function(w){used+=w.peak;if(w.mib)total=w.mib;});
var r=sv('rect',{'class':'whole',x:1,y:1,width:width-GAP,height:HT-2,rx:4});
r.style.fill=whole.length?colour(whole[0].name):'#e4e4e4';
grp.appendChild(tip(text+(whole.length?'; memory: peak '+num(used)+' of '+num(total)+' MiB':'')));
grp.appendChild(r);grp.appendChild(label(8,22,text,'name',width-16));
if(whole.length){grp.appendChild(label(8,38,num(used)+' / '+num(total)+' MiB used (peak)','mib',width-16));
bar(grp,8,HT-12,width-16,used,total);}
s.appendChild(grp);return s;}
var keep={},busy={},taken={};(other||[]).forEach(function(i){keep[i.key]=1;});
var cur=insts(g[2],g[4])||[];g[6].forEach(function(k){busy[cur[k].key]=1;});
lay.forEach(function(i){for(var k=i.start;k<i.start+Math.min(i.ms,m[1]-i.start);k++)taken[k]=1;});
for(var slot=0;slot<m[1];slot++)if(!taken[slot])s.appendChild(sv('rect',{'class':'free','data-slot':slot,
x:slot*SLOT+1,y:1,width:SLOT-GAP,height:HT-2,rx:3}));
lay.forEach(function(i,k){var slices=Math.min(i.ms,m[1]-i.start),x=i.start*SLOT+1,w=slices*SLOT-GAP;
var change=keep[i.key]?'kept':side==='current'?'destroyed':'created',on=ws[k]||[],isBusy=!!busy[i.key];
var names=on.map(function(w){return w.name;}).join(', '),peak=0;on.forEach(function(w){peak=Math.max(peak,w.peak);});
var c=sv('g',{'class':'cell '+change});
c.appendChild(tip(i.key+' ('+i.mib+' MiB, '+i.cs+' compute slice'+(i.cs!==1?'s':'')+'): '+(on.length?
names+', peak '+peak+' MiB':isBusy?'busy: processes run on it':'no workload of this plan')+'; '+change));
var r=sv('rect',{'class':'inst '+change,'data-side':side,'data-profile':i.name,'data-start':i.start,
'data-slices':slices,'data-workload':names,x:x,y:1,width:w,height:HT-2,rx:4});
r.style.fill=on.length?colour(on[0].name):'#f2f2f2';c.appendChild(r);
for(var j=0;j<i.cs;j++)c.appendChild(sv('rect',{'class':'sm',x:x+4+j*7,y:5,width:5,height:5}));
c.appendChild(label(x+4,24,i.name,'prof',w-6));c.appendChild(label(x+4,37,names||(isBusy?'busy':'-'),'name',w-6));
if(on.length&&i.mib)bar(c,x+3,HT-12,w-6,peak,i.mib);
s.appendChild(c);});return s;}

function row(n){var g=G[n],m=M[g[2]],tgt=insts(g[2],g[5]);
var sec=el('section','gpu-row');sec.id='g'+n;sec.setAttribute('data-n',n);sec.setAttribute('data-gpu',g[1]);
sec.setAttribute('data-model',m[0]);sec.setAttribute('data-changes',g[7]);
var state=g[3]&EXCLUDED?'excluded':g[3]&RESERVED?'reserved':g[7]?'change':'unchanged';
var h=el('h3',null,'GPU '+g[1]+' ');h.appendChild(el('span','model',m[0]));h.appendChild(document.createTextNode(' '));
h.appendChild(el('span','state '+state,state));
h.appendChild(el('span','gmem','memory used (peaks) '+num(g[11])+' of '+num(m[4])+' MiB'));sec.appendChild(h);
var pair=el('div','pair');['current','target'].forEach(function(side){var f=el('figure');
f.appendChild(el('figcaption',null,side));f.appendChild(svg(n,side));pair.appendChild(f);});
var ch=el('div','changes');ch.appendChild(el('b',null,'nvidia-smi commands'));
ch.appendChild(el('pre','cmds',g[8].length?g[8].join('\n'):'# nothing to do'));
if(g[3]&MOVES)ch.appendChild(el('p','note','Moves touch this GPU: apply runs these commands in smaller steps '+
'around them, in the order of the Moves section (migplan apply --dry-run -o sh prints that order).'));
pair.appendChild(ch);sec.appendChild(pair);
var ul=el('ul','wl');g[9].forEach(function(w){var li=el('li'),sw=el('span','swatch');sw.style.background=colour(w[0]);
var mib=w[1]>=0&&tgt?tgt[w[1]].mib:w[4];li.appendChild(sw);li.appendChild(document.createTextNode(w[0]+' '));
li.appendChild(el('code',null,w[1]>=0&&tgt?tgt[w[1]].key:'whole GPU'));li.appendChild(document.createTextNode(' '));
li.appendChild(el('span',MARKS[w[3]],MARKS[w[3]]));li.appendChild(document.createTextNode(' '));
li.appendChild(el('span','mem-text','peak '+num(w[2])+' / '+num(mib)+' MiB, margin '+num(mib-w[2])+' MiB'));
ul.appendChild(li);});sec.appendChild(ul);return sec;}

function hostBox(h){var d=el('details','host'),ns=byHost[h],total=0,changing=0,nw=0;
ns.forEach(function(n){total+=G[n][7];if(G[n][7])changing++;nw+=G[n][9].length;});
d.setAttribute('data-host',H[h]);d.setAttribute('data-h',h);d.setAttribute('data-changes',total);
var s=el('summary');s.appendChild(el('b',null,H[h]));s.appendChild(document.createTextNode(' '));
s.appendChild(el('span','meta',ns.length+' GPU(s), '+nw+' workload(s), '+changing+' changing ('+total+' action(s))'));
d.appendChild(s);d.addEventListener('toggle',function(){if(d.open)draw(h);});return d;}
function draw(h){if(drawn[h])return;drawn[h]=true;var f=document.createDocumentFragment();
byHost[h].forEach(function(n){var r=row(n);r.hidden=!match(n);f.appendChild(r);});hostEl[h].appendChild(f);}

function match(n){var f=FILTERS[filter];if(f&&!(G[n][3]&f))return false;if(!term)return true;
if(!words)words=G.map(function(g){return (H[g[0]]+' '+M[g[2]][0]+' '+g[9].map(function(w){return w[0];}).join(' ')+
' '+g[10].map(function(w){return w[0];}).join(' ')).toLowerCase();});
return words[n].indexOf(term)>=0;}
function show(){term=q.value.trim().toLowerCase();var per=H.map(function(){return 0;}),shown=0,hosts=0;
for(var n=0;n<G.length;n++){var ok=match(n);cells[n].classList.toggle('off',!ok);if(ok){shown++;per[G[n][0]]++;}}
for(var h=0;h<H.length;h++){var d=hostEl[h];d.hidden=!per[h];groups[h].classList.toggle('off',!per[h]);
if(per[h])hosts++;if(drawn[h])Array.prototype.forEach.call(d.querySelectorAll('section.gpu-row'),function(r){
r.hidden=!match(+r.getAttribute('data-n'));});}
Array.prototype.forEach.call(buttons,function(b){b.setAttribute('aria-pressed',String(b.getAttribute('data-filter')===filter));});
document.body.setAttribute('data-filter',filter);
count.textContent=num(shown)+' of '+num(G.length)+' GPU(s) on '+num(hosts)+' host(s)';}
function order(){var hs=H.map(function(_,h){return h;});if(sort.value==='changes')hs.sort(function(a,b){
return (+hostEl[b].getAttribute('data-changes'))-(+hostEl[a].getAttribute('data-changes'))||a-b;});
var f=document.createDocumentFragment();hs.forEach(function(h){f.appendChild(hostEl[h]);});box.appendChild(f);}
function openHost(h){draw(h);hostEl[h].open=true;}
function go(n){if(!(n>=0&&n<G.length))return;var h=G[n][0];hostEl[h].hidden=false;openHost(h);
document.getElementById('s-gpus').open=true;var r=document.getElementById('g'+n);r.hidden=false;
Array.prototype.forEach.call(document.querySelectorAll('.sel'),function(e){e.classList.remove('sel');});
r.classList.add('sel');cells[n].classList.add('sel');r.scrollIntoView({block:'start'});}
function fromHash(){var m=/^#g(\d+)$/.exec(location.hash);if(m)go(+m[1]);}
function setParam(k,v){try{var u=new URL(location.href);if(v)u.searchParams.set(k,v);else u.searchParams.delete(k);
history.replaceState(null,'',u.href);}catch(e){}}

grid.addEventListener('click',function(e){var a=e.target.closest&&e.target.closest('a');if(!a)return;
e.preventDefault();var href=a.getAttribute('href');try{history.replaceState(null,'',href);}catch(x){}
go(+href.slice(2));});
grid.addEventListener('mouseover',function(e){var a=e.target.closest&&e.target.closest('a');if(!a||a.title)return;
var n=+a.getAttribute('href').slice(2),g=G[n],m=M[g[2]];a.title=H[g[0]]+' GPU '+g[1]+' · '+m[0]+' · memory used '+
num(g[11])+' of '+num(m[4])+' MiB · '+(g[7]?g[7]+' action(s)':'unchanged')+(g[3]&AT_RISK?' · workload at risk':'')+
(g[3]&LEFT_OUT?' · processes outside the plan':'');});
Array.prototype.forEach.call(buttons,function(b){b.addEventListener('click',function(){
filter=b.getAttribute('data-filter');show();setParam('filter',filter==='all'?'':filter);
var open={'at-risk':'s-kept-at-risk','left-out':'s-left-out'}[filter];
if(open&&document.getElementById(open))document.getElementById(open).open=true;});});
q.addEventListener('input',show);
sort.addEventListener('change',function(){order();setParam('sort',sort.value==='host'?'':sort.value);});
document.getElementById('open').addEventListener('click',function(){
for(var h=0;h<H.length;h++)if(!hostEl[h].hidden)openHost(h);});
document.getElementById('close').addEventListener('click',function(){hostEl.forEach(function(d){d.open=false;});});
window.addEventListener('hashchange',fromHash);

for(var h=0;h<H.length;h++)hostEl.push(hostBox(h));
var p=new URLSearchParams(location.search);
if(FILTERS[p.get('filter')])filter=p.get('filter');if(p.get('q'))q.value=p.get('q');
if(p.get('sort')==='changes')sort.value='changes';order();show();
if(D.open||p.get('open')==='all')for(h=0;h<H.length;h++)if(!hostEl[h].hidden)openHost(h);
fromHash();
document.body.setAttribute('data-ready','1');
})();
"""
