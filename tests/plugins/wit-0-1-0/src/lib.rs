//! Test policy built against `mfsched:scheduler@0.1.0` (the WIT of mfsched
//! before models became data, kept in `tests/fixtures/wit-0.1.0/`): otherwise
//! well-behaved, so the only reason a 0.2 host can give for refusing it is
//! the version.

/// The generated bindings; wit-bindgen's glue is FFI, hence unsafe.
#[allow(unsafe_code)]
mod bindings {
    wit_bindgen::generate!({
        world: "policy",
        path: "../../fixtures/wit-0.1.0",
    });

    struct KeepCurrent;

    impl Guest for KeepCurrent {
        fn name() -> String {
            "test: built against WIT 0.1.0".into()
        }

        fn parameters() -> Vec<ParamSpec> {
            Vec::new()
        }

        fn decide(problem: Problem, _: GpuState, _: Vec<Param>) -> Result<Decision, String> {
            Ok(Decision {
                config: problem.current,
                candidates_evaluated: 0,
            })
        }
    }

    export!(KeepCurrent);
}
