// The 3D views of clashctl's sequence report, embedded into clashctl at build time with three.js
// (client/report/embed_assets.py) and written into every report as an inline module script.
//
// three.js's two module files sit in the page as text (#three-core, #three-module); they are
// imported from blob: URLs, so the report needs no network and no file beside it. One hidden
// WebGL renderer draws every view and copies the picture onto the view's 2D canvas (browsers
// cap the number of live WebGL contexts, and a sequence can have many steps).
//
// When done, <body data-render> is "done" (or "failed: <reason>") and <body data-views> holds
// the page rectangles of the drawn canvases as JSON [[x, y, width, height], ...]: the
// screenshot test reads both.

const COLORS = {moving: 0x2f6fdf, blocker: 0xe01818, context: 0xb8bdc5, witness: 0xffb000};

function text(id) {
  return document.getElementById(id).textContent;
}

function moduleUrl(code) {
  return URL.createObjectURL(new Blob([code], {type: 'text/javascript'}));
}

function decode(base64) {
  const s = atob(base64);
  const bytes = new Uint8Array(s.length);
  for (let i = 0; i < s.length; ++i) bytes[i] = s.charCodeAt(i);
  return bytes.buffer;
}

async function loadThree() {
  const core = moduleUrl(text('three-core'));
  const module = text('three-module').split("'./three.core.js'").join(JSON.stringify(core));
  return import(moduleUrl(module));
}

function makeGeometry(THREE, part) {
  if (part.v) {
    const g = new THREE.BufferGeometry();
    g.setAttribute('position', new THREE.BufferAttribute(new Float32Array(decode(part.v)), 3));
    g.setIndex(new THREE.BufferAttribute(new Uint32Array(decode(part.i)), 1));
    g.computeBoundingSphere();
    return {geometry: g, box: false};
  }
  // A part left out of the report (triangle budget): its bounding box, as edges.
  const b = part.box;
  const g = new THREE.BoxGeometry(b[3] - b[0], b[4] - b[1], b[5] - b[2]);
  g.translate((b[0] + b[3]) / 2, (b[1] + b[4]) / 2, (b[2] + b[5]) / 2);
  return {geometry: new THREE.EdgesGeometry(g), box: true};
}

function material(THREE, role, box) {
  if (box) return new THREE.LineBasicMaterial({color: COLORS[role]});
  const m = new THREE.MeshPhongMaterial({
    color: COLORS[role],
    flatShading: true,
    side: THREE.DoubleSide,
    shininess: 20,
  });
  if (role === 'context') {
    m.transparent = true;
    m.opacity = 0.3;
    m.depthWrite = false;
  }
  return m;
}

function buildScene(THREE, data, view, geometries) {
  const scene = new THREE.Scene();
  scene.background = new THREE.Color(0xf4f5f7);
  scene.add(new THREE.HemisphereLight(0xffffff, 0x707070, 2.2));
  const sun = new THREE.DirectionalLight(0xffffff, 1.6);
  scene.add(sun);
  for (const o of view.objects) {
    const part = data.parts[o.part];
    if (!part) continue;
    if (!geometries.has(o.part)) geometries.set(o.part, makeGeometry(THREE, part));
    const {geometry, box} = geometries.get(o.part);
    const obj = box ? new THREE.LineSegments(geometry, material(THREE, o.role, true))
                    : new THREE.Mesh(geometry, material(THREE, o.role, false));
    obj.matrixAutoUpdate = false;
    obj.matrix.set(...o.m);  // row-major, as written by the report
    obj.renderOrder = o.role === 'context' ? 1 : 0;
    scene.add(obj);
  }
  const f = view.focus;
  const center = new THREE.Vector3((f[0] + f[3]) / 2, (f[1] + f[4]) / 2, (f[2] + f[5]) / 2);
  const size = Math.max(1, Math.hypot(f[3] - f[0], f[4] - f[1], f[5] - f[2]));
  for (const p of view.witness) {
    const marker = new THREE.Mesh(
        new THREE.SphereGeometry(size * 0.02, 16, 12),
        new THREE.MeshBasicMaterial({color: COLORS.witness, depthTest: false}));
    marker.position.set(p[0], p[1], p[2]);
    marker.renderOrder = 2;
    scene.add(marker);
  }
  return {scene, sun, center, size};
}

function setUpView(THREE, renderer, canvas, data, view, geometries) {
  const {scene, sun, center, size} = buildScene(THREE, data, view, geometries);
  const camera = new THREE.PerspectiveCamera(35, canvas.width / canvas.height, size / 1000,
                                             size * 100);
  camera.up.set(0, 0, 1);  // CAD convention: Z up
  const orbit = {azimuth: -Math.PI / 3, elevation: Math.PI / 6, distance: 1.9 * size};
  const context = canvas.getContext('2d');
  function draw() {
    const c = Math.cos(orbit.elevation);
    camera.position.set(center.x + orbit.distance * c * Math.cos(orbit.azimuth),
                        center.y + orbit.distance * c * Math.sin(orbit.azimuth),
                        center.z + orbit.distance * Math.sin(orbit.elevation));
    camera.lookAt(center);
    sun.position.copy(camera.position);
    renderer.render(scene, camera);
    context.drawImage(renderer.domElement, 0, 0, canvas.width, canvas.height);
  }
  let drag = null;
  canvas.addEventListener('pointerdown', (e) => {
    drag = {x: e.clientX, y: e.clientY};
    canvas.setPointerCapture(e.pointerId);
  });
  canvas.addEventListener('pointerup', () => { drag = null; });
  canvas.addEventListener('pointermove', (e) => {
    if (!drag) return;
    orbit.azimuth -= (e.clientX - drag.x) * 0.01;
    orbit.elevation = Math.max(-1.5, Math.min(1.5, orbit.elevation + (e.clientY - drag.y) * 0.01));
    drag = {x: e.clientX, y: e.clientY};
    draw();
  });
  canvas.addEventListener('wheel', (e) => {
    e.preventDefault();
    orbit.distance *= Math.exp(e.deltaY * 0.001);
    draw();
  }, {passive: false});
  draw();
}

async function main() {
  const THREE = await loadThree();
  const data = JSON.parse(text('clash-data'));
  const canvases = document.querySelectorAll('canvas.view');
  if (canvases.length === 0) return [];
  const renderer = new THREE.WebGLRenderer({antialias: true, preserveDrawingBuffer: true});
  renderer.setPixelRatio(1);
  renderer.setSize(canvases[0].width, canvases[0].height, false);
  const geometries = new Map();
  const rects = [];
  for (const canvas of canvases) {
    const view = data.views[Number(canvas.dataset.view)];
    if (!view) continue;
    setUpView(THREE, renderer, canvas, data, view, geometries);
    const r = canvas.getBoundingClientRect();
    rects.push([r.left + window.scrollX, r.top + window.scrollY, r.width, r.height]);
  }
  return rects;
}

main().then(
    (rects) => {
      document.body.dataset.views = JSON.stringify(rects);
      document.body.dataset.render = 'done';
    },
    (error) => {
      document.body.dataset.render = 'failed: ' + error;
      console.error(error);
    });
