//! Loading plugin components (embedded or from files), telling which world
//! they implement, and the swappable slots the decision path reads from.

use super::bindings::policy::PolicyPre;
use super::bindings::utility::UtilityPre;
use super::bindings::{PACKAGE, wit};
use super::context::{PolicyCtx, UtilityCtx};
use super::engine::{PluginEngine, arm_deadline};
use super::failure::describe;
use super::output::printable;
use super::precheck::{ComponentIdentity, ComponentMetadata};
use super::version::check_component_versions;
use anyhow::{Context as _, Result, anyhow, bail};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use wasmtime::Store;
use wasmtime::component::Component;

include!(concat!(env!("OUT_DIR"), "/embedded_plugins.rs"));

/// Where a plugin came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Built from `plugins/` and embedded in the binary.
    Embedded,
    File(PathBuf),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Embedded => f.write_str("embedded"),
            Origin::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// The WIT world a component implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum World {
    Policy,
    Utility,
}

impl fmt::Display for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            World::Policy => "policy",
            World::Utility => "utility",
        })
    }
}

/// What the host knows about a loaded plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginInfo {
    /// Registry name: the embedded name or the file stem.
    pub name: String,
    pub origin: Origin,
    pub world: World,
    /// Version of `mfsched:scheduler` the component was built against.
    pub wit_version: String,
    /// What the plugin calls itself.
    pub title: String,
    /// The parameter schema it declares (`parameters`).
    pub params: Vec<ParamInfo>,
    /// SHA-256 of the component's bytes, hex: its identity, whatever its name.
    pub sha256: String,
    /// Name, version and authors the component declares, if any.
    pub metadata: ComponentMetadata,
}

impl PluginInfo {
    /// The first 12 hex digits of [`PluginInfo::sha256`], for people.
    pub fn short_hash(&self) -> &str {
        mfsched_core::short_digest(&self.sha256)
    }

    pub fn identity(&self) -> ComponentIdentity {
        ComponentIdentity {
            sha256: self.sha256.clone(),
            metadata: self.metadata.clone(),
        }
    }
}

/// One entry of a policy's or a utility's parameter schema.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ParamInfo {
    pub name: String,
    pub default_value: String,
    pub description: String,
}

impl From<wit::ParamSpec> for ParamInfo {
    fn from(p: wit::ParamSpec) -> Self {
        Self {
            name: p.name,
            default_value: p.default_value,
            description: p.description,
        }
    }
}

/// A compiled policy, ready to instantiate.
pub struct LoadedPolicy {
    pub info: PluginInfo,
    pub(super) pre: PolicyPre<PolicyCtx>,
}

/// A compiled utility, ready to instantiate, with the parameters it is
/// called with.
pub struct LoadedUtility {
    pub info: PluginInfo,
    pub(super) pre: UtilityPre<UtilityCtx>,
    /// What the user set (`policy.utility_params`, `--utility-param`),
    /// kept so a hot-swapped build of the same utility gets them too.
    given: Vec<(String, String)>,
    /// Every declared parameter, given or at its default: what `score` and
    /// `terms` receive.
    pub(super) params: Vec<wit::Param>,
}

impl LoadedUtility {
    fn new(info: PluginInfo, pre: UtilityPre<UtilityCtx>) -> Result<Self, String> {
        Self {
            info,
            pre,
            given: Vec::new(),
            params: Vec::new(),
        }
        .configured(Vec::new())
    }

    /// The same component called with `given`, checked against the schema it
    /// declares: an unknown key is refused, naming it and the known ones.
    pub fn configured(&self, given: Vec<(String, String)>) -> Result<Self, String> {
        let params = super::setup::with_declared_params(&self.info, given.clone())?
            .into_iter()
            .map(|(key, value)| wit::Param { key, value })
            .collect();
        Ok(Self {
            info: self.info.clone(),
            pre: self.pre.clone(),
            given,
            params,
        })
    }

    /// What the user set, in the order given.
    pub fn given(&self) -> &[(String, String)] {
        &self.given
    }

    /// Every parameter it is called with (given or at its default).
    pub fn params_pairs(&self) -> Vec<(String, String)> {
        self.params
            .iter()
            .map(|p| (p.key.clone(), p.value.clone()))
            .collect()
    }

    /// Its parameters as people read them: `k=v k=v` (empty when none).
    pub fn params_text(&self) -> String {
        self.params
            .iter()
            .map(|p| format!("{}={}", p.key, p.value))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Which utility scores, as the dashboard names it: `name@hash`, and its
    /// parameters in brackets when it has any.
    pub fn label(&self) -> String {
        let params = self.params_text();
        if params.is_empty() {
            format!("{}@{}", self.info.name, self.info.short_hash())
        } else {
            format!("{}@{} ({params})", self.info.name, self.info.short_hash())
        }
    }
}

impl fmt::Debug for LoadedPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedPolicy")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for LoadedUtility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedUtility")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// A loaded plugin of either world.
#[derive(Debug, Clone)]
pub enum Loaded {
    Policy(Arc<LoadedPolicy>),
    Utility(Arc<LoadedUtility>),
}

impl Loaded {
    pub fn info(&self) -> &PluginInfo {
        match self {
            Loaded::Policy(p) => &p.info,
            Loaded::Utility(u) => &u.info,
        }
    }
}

/// Compiles a component, works out its world and WIT version, links it and asks
/// it to describe itself (under the usual deadline and memory limit).
pub fn load(engine: &PluginEngine, name: &str, origin: Origin, bytes: &[u8]) -> Result<Loaded> {
    // Wasmtime would read anything else as WAT text and report a parse error
    // that says little about a truncated or foreign file.
    let looks_like_wat = bytes.trim_ascii_start().starts_with(b"(");
    if !bytes.starts_with(b"\0asm") && !looks_like_wat {
        bail!(
            "not a valid Wasm component: the file ({} bytes) starts with neither the \\0asm magic nor WAT text",
            bytes.len()
        );
    }
    // WAT text is encoded first, so it passes the same checks as a binary.
    let binary = if looks_like_wat {
        std::borrow::Cow::Owned(
            wat::parse_bytes(bytes)
                .map_err(|e| anyhow!("not a valid Wasm component: {e}"))?
                .into_owned(),
        )
    } else {
        std::borrow::Cow::Borrowed(bytes)
    };
    let metadata = super::precheck::check_shape(&binary)?;
    let compiled = Component::new(engine.engine(), &*binary);
    super::engine::release_freed_memory();
    let component =
        compiled.map_err(|e| anyhow!("not a valid Wasm component: {}", describe(&e)))?;
    let ty = component.component_type();
    // Before the world: a component of another WIT version would otherwise be
    // refused with a bare missing-import error.
    check_component_versions(
        ty.imports(engine.engine())
            .chain(ty.exports(engine.engine()))
            .map(|(n, _)| n),
    )
    .map_err(|e| anyhow!(e))?;
    let exports: Vec<&str> = ty.exports(engine.engine()).map(|(n, _)| n).collect();
    let world = if exports.contains(&"decide") {
        World::Policy
    } else if exports.contains(&"score") {
        World::Utility
    } else {
        bail!(
            "exports neither `decide` (policy world) nor `score` (utility world) of {PACKAGE}; it exports: {}",
            if exports.is_empty() {
                "nothing".to_string()
            } else {
                exports.join(", ")
            }
        );
    };
    let wit_version = ty
        .imports(engine.engine())
        .chain(ty.exports(engine.engine()))
        .find_map(|(n, _)| {
            n.strip_prefix(PACKAGE)
                .and_then(|rest| rest.split_once('@'))
                .map(|(_, v)| v.to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let mut info = PluginInfo {
        sha256: mfsched_core::sha256_hex(bytes),
        metadata,
        name: name.to_string(),
        origin,
        world,
        wit_version,
        title: String::new(),
        params: Vec::new(),
    };
    // Loading is off the decision path (start-up, the reload thread), so its
    // calls (`name`, `parameters`) get at least LOAD_DEADLINE: a decision
    // deadline of a few milliseconds must not refuse a sound component on a busy
    // machine, while a guest that spins in `name` is still stopped.
    let deadline_at = std::time::Instant::now() + engine.limits().deadline.max(LOAD_DEADLINE);
    match world {
        World::Policy => {
            let pre = engine
                .policy_linker
                .instantiate_pre(&component)
                .and_then(PolicyPre::new)
                .map_err(|e| anyhow!("does not fit the policy world: {}", describe(&e)))?;
            let mut store = Store::new(engine.engine(), PolicyCtx::describing(engine));
            store.limiter(|ctx| &mut ctx.memory);
            arm_deadline(&mut store, deadline_at);
            let instance = pre
                .instantiate(&mut store)
                .map_err(|e| anyhow!("cannot be instantiated: {}", describe(&e)))?;
            info.title = bounded_title(
                instance
                    .call_name(&mut store)
                    .map_err(|e| anyhow!("`name` failed: {}", describe(&e)))?,
            )?;
            let params = instance
                .call_parameters(&mut store)
                .map_err(|e| anyhow!("`parameters` failed: {}", describe(&e)))?;
            info.params = declared(params)?;
            Ok(Loaded::Policy(Arc::new(LoadedPolicy { info, pre })))
        }
        World::Utility => {
            let pre = engine
                .utility_linker
                .instantiate_pre(&component)
                .and_then(UtilityPre::new)
                .map_err(|e| anyhow!("does not fit the utility world: {}", describe(&e)))?;
            let mut store = Store::new(engine.engine(), UtilityCtx::new(engine));
            store.limiter(|ctx| ctx.memory_mut());
            arm_deadline(&mut store, deadline_at);
            let instance = pre
                .instantiate(&mut store)
                .map_err(|e| anyhow!("cannot be instantiated: {}", describe(&e)))?;
            info.title = bounded_title(
                instance
                    .call_name(&mut store)
                    .map_err(|e| anyhow!("`name` failed: {}", describe(&e)))?,
            )?;
            let params = instance
                .call_parameters(&mut store)
                .map_err(|e| anyhow!("`parameters` failed: {}", describe(&e)))?;
            info.params = declared(params)?;
            let utility = LoadedUtility::new(info, pre).map_err(|e| anyhow!(e))?;
            Ok(Loaded::Utility(Arc::new(utility)))
        }
    }
}

/// The least time a component's load-time calls (instantiation, `name`,
/// `parameters`) get, whatever the decision deadline.
pub const LOAD_DEADLINE: std::time::Duration = std::time::Duration::from_secs(1);

/// The most bytes a plugin's `name` may return (it is shown in one line).
pub const MAX_TITLE_BYTES: usize = 256;
/// The most parameters a policy or a utility may declare.
pub const MAX_PARAMS: usize = 64;
/// The most bytes of one parameter's name, default or description.
pub const MAX_PARAM_TEXT_BYTES: usize = 1024;

/// A component's parameter schema, bounded: at most [`MAX_PARAMS`] entries,
/// none named `seed` (the host reserves it for policies, and one name means
/// one thing across both worlds).
fn declared(params: Vec<wit::ParamSpec>) -> Result<Vec<ParamInfo>> {
    if params.iter().any(|p| p.name == super::setup::SEED) {
        bail!("`parameters` declares `seed`, which the host reserves (it always passes one)");
    }
    if params.len() > MAX_PARAMS {
        bail!(
            "`parameters` declared {} parameters (the most is {MAX_PARAMS})",
            params.len()
        );
    }
    params
        .into_iter()
        .map(ParamInfo::from)
        .map(ParamInfo::bounded)
        .collect()
}

/// A title within [`MAX_TITLE_BYTES`], control characters escaped.
fn bounded_title(title: String) -> Result<String> {
    if title.len() > MAX_TITLE_BYTES {
        bail!(
            "`name` returned {} bytes (the most is {MAX_TITLE_BYTES})",
            title.len()
        );
    }
    Ok(printable(&title, MAX_TITLE_BYTES))
}

impl ParamInfo {
    /// Within [`MAX_PARAM_TEXT_BYTES`] per field, control characters escaped.
    fn bounded(self) -> Result<Self> {
        for (field, text) in [
            ("name", &self.name),
            ("default", &self.default_value),
            ("description", &self.description),
        ] {
            if text.len() > MAX_PARAM_TEXT_BYTES {
                bail!(
                    "`parameters`: a parameter's {field} has {} bytes (the most is {MAX_PARAM_TEXT_BYTES})",
                    text.len()
                );
            }
        }
        Ok(Self {
            name: printable(&self.name, MAX_PARAM_TEXT_BYTES),
            default_value: printable(&self.default_value, MAX_PARAM_TEXT_BYTES),
            description: printable(&self.description, MAX_PARAM_TEXT_BYTES),
        })
    }
}

/// Loads a plugin file; its registry name is the file stem.
pub fn load_file(engine: &PluginEngine, path: &Path) -> Result<Loaded> {
    let name = file_name(path)?;
    let bytes = super::precheck::read_component_file(path)?;
    load(engine, name, Origin::File(path.to_path_buf()), &bytes)
        .with_context(|| format!("plugin {}", mfsched_core::printable_path(path)))
}

/// The registry name of a plugin file, its stem: UTF-8, printable and at most
/// [`crate::output::NAME_BYTES`], since it names the policy in configs,
/// listings, the API and the decision log. Anything else is refused before
/// the file is read.
pub fn file_name(path: &Path) -> Result<&str> {
    let shown = || mfsched_core::printable_path(path);
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .with_context(|| format!("{}: the file name is not valid UTF-8", shown()))?;
    if name.chars().any(char::is_control) || name.len() > crate::output::NAME_BYTES {
        bail!(
            "{}: a plugin's file name names the policy, so it must hold no control character and at most {} bytes",
            shown(),
            crate::output::NAME_BYTES
        );
    }
    Ok(name)
}

/// The `.wasm` files of a plugin directory, sorted.
pub fn dir_plugins(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read the plugin directory {}", dir.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| !p.is_dir() && p.extension().is_some_and(|e| e == "wasm"))
        .collect();
    files.sort();
    Ok(files)
}

/// Finds a plugin by spec: a path to a `.wasm` file, or a name looked up first
/// in `dir` (`NAME.wasm`, which overrides the embedded one) then among the
/// embedded plugins.
pub fn resolve(engine: &PluginEngine, spec: &str, dir: Option<&Path>) -> Result<Loaded> {
    let as_path = Path::new(spec);
    if as_path.extension().is_some_and(|e| e == "wasm") {
        if !as_path.is_file() {
            bail!("plugin file {} does not exist", as_path.display());
        }
        return load_file(engine, as_path);
    }
    if let Some(dir) = dir {
        let candidate = dir.join(format!("{spec}.wasm"));
        if candidate.is_file() {
            return load_file(engine, &candidate);
        }
    }
    let (_, bytes) = EMBEDDED_PLUGINS
        .iter()
        .find(|(n, _)| *n == spec)
        .with_context(|| {
            format!(
                "unknown plugin '{spec}': use one of {}{} or a path to a .wasm component",
                embedded_names().collect::<Vec<_>>().join(", "),
                dir.map(|d| format!(" (or a NAME.wasm in {})", d.display()))
                    .unwrap_or_default()
            )
        })?;
    load(engine, spec, Origin::Embedded, bytes).with_context(|| format!("embedded plugin {spec}"))
}

pub fn resolve_policy(
    engine: &PluginEngine,
    spec: &str,
    dir: Option<&Path>,
) -> Result<Arc<LoadedPolicy>> {
    match resolve(engine, spec, dir)? {
        Loaded::Policy(p) => Ok(p),
        Loaded::Utility(u) => bail!(
            "plugin '{}' is a utility, not a policy (it exports `score`, not `decide`)",
            u.info.name
        ),
    }
}

pub fn resolve_utility(
    engine: &PluginEngine,
    spec: &str,
    dir: Option<&Path>,
) -> Result<Arc<LoadedUtility>> {
    match resolve(engine, spec, dir)? {
        Loaded::Utility(u) => Ok(u),
        Loaded::Policy(p) => bail!(
            "plugin '{}' is a policy, not a utility (it exports `decide`, not `score`)",
            p.info.name
        ),
    }
}

pub fn embedded_names() -> impl Iterator<Item = &'static str> {
    EMBEDDED_PLUGINS.iter().map(|(n, _)| *n)
}

/// Every embedded plugin, then every `.wasm` of `dir`: each loaded and
/// described, or the reason it could not be.
pub fn list(
    engine: &PluginEngine,
    dir: Option<&Path>,
) -> Result<Vec<(String, Result<PluginInfo>)>> {
    let mut out = Vec::new();
    for (name, bytes) in EMBEDDED_PLUGINS {
        let loaded = load(engine, name, Origin::Embedded, bytes).map(|l| l.info().clone());
        out.push((name.to_string(), loaded));
    }
    if let Some(dir) = dir {
        for path in dir_plugins(dir)? {
            let loaded = load_file(engine, &path).map(|l| l.info().clone());
            out.push((path.display().to_string(), loaded));
        }
    }
    Ok(out)
}

/// A plugin the decision path uses, replaceable at any time: readers clone the
/// `Arc` under a read lock held for a pointer copy, so a swap never waits for a
/// decision and a decision never sees half a swap.
#[derive(Debug)]
pub struct Slot<T> {
    current: RwLock<Arc<T>>,
}

impl<T> Slot<T> {
    pub fn new(value: Arc<T>) -> Self {
        Self {
            current: RwLock::new(value),
        }
    }

    pub fn load(&self) -> Arc<T> {
        Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Installs `value`, returning what it replaces.
    pub fn swap(&self, value: Arc<T>) -> Arc<T> {
        let mut guard = self.current.write().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *guard, value)
    }
}

/// The plugins in use, by name, each in a swappable slot (what hot reload updates).
#[derive(Debug, Default)]
pub struct Registry {
    policies: Mutex<BTreeMap<String, Arc<Slot<LoadedPolicy>>>>,
    utilities: Mutex<BTreeMap<String, Arc<Slot<LoadedUtility>>>>,
}

impl Registry {
    /// The slot for this policy's name, created (holding it) if new.
    pub fn policy_slot(&self, policy: Arc<LoadedPolicy>) -> Arc<Slot<LoadedPolicy>> {
        let mut map = self.policies.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(
            map.entry(policy.info.name.clone())
                .or_insert_with(|| Arc::new(Slot::new(policy))),
        )
    }

    pub fn utility_slot(&self, utility: Arc<LoadedUtility>) -> Arc<Slot<LoadedUtility>> {
        let mut map = self.utilities.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(
            map.entry(utility.info.name.clone())
                .or_insert_with(|| Arc::new(Slot::new(utility))),
        )
    }

    /// The names of every policy held, sorted.
    pub fn policy_names(&self) -> Vec<String> {
        self.policies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    pub fn find_policy(&self, name: &str) -> Option<Arc<Slot<LoadedPolicy>>> {
        let map = self.policies.lock().unwrap_or_else(|e| e.into_inner());
        map.get(name).cloned()
    }

    /// The component behind the policy `name` now (`None` for a native
    /// policy or a name not loaded).
    pub fn policy_identity(&self, name: &str) -> Option<ComponentIdentity> {
        self.find_policy(name)
            .map(|slot| slot.load().info.identity())
    }

    pub fn find_utility(&self, name: &str) -> Option<Arc<Slot<LoadedUtility>>> {
        let map = self.utilities.lock().unwrap_or_else(|e| e.into_inner());
        map.get(name).cloned()
    }
}
