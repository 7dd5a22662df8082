// Package testenv is the test kit of metalheal's controllers: a real kube-apiserver and etcd
// (controller-runtime's envtest) from the binaries that hack/build-control-plane.sh builds into ./bin,
// with metalheal's CRDs installed.
//
// A package's envtest suite starts one Env for all its specs (Up in a Ginkgo BeforeSuite): the CRDs it needs (Cluster API's with EnvOptions.ClusterAPI, its own
// test CRDs), the scheme, the namespaces every test shares and a direct client. Each test then takes a
// World of its own from it: a namespace, a fake clock to inject into the reconcilers and a Recorder of
// the events they emit. A test that runs a real manager builds it with Env.NewManager and runs it for
// the rest of the test with RunManager.
//
// Around the Env, what tests of particular situations need: Cluster API's CRDs of an older release
// (ClusterAPIV1Beta1CRDs), a CRD made at run time and RBAC granted to an impersonated manager (CRD,
// Grant, RequestLog), and an API server that stops answering (Proxy).
package testenv
