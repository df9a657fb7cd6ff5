// RootKeyTests: the text of a root key, made and read in one place.
import DocDriveCore
import XCTest

final class RootKeyTests: XCTestCase {
    func testKeysReadBackAsTheyWereMade() {
        for key in [RootKey.store("work"), .store("a:b"), .app(id: "org.gnome.TextEditor", folder: "Documents"),
                    .app(id: "x", folder: "Inbox")] {
            XCTAssertEqual(RootKey(key.description), key, key.description)
        }
        XCTAssertEqual(RootKey.store("work").description, "store:work")
        XCTAssertEqual(RootKey.app(id: "ed", folder: "Data").description, "app:ed:Data")
        XCTAssertEqual(RootKey("app:ed:Data")?.appID, "ed")
        XCTAssertEqual(RootKey("store:work")?.storeName, "work")
        XCTAssertNil(RootKey("store:work")?.appID)
    }

    func testTextNoRootHasIsNoKey() {
        for text in ["", "store:", "app:", "app:ed", "app::Documents", "app:ed:", "apps:ed:Documents", "Store:work", "work"] {
            XCTAssertNil(RootKey(text), text)
        }
    }

    func testAnAppsRangeHoldsItsFoldersAndNoOtherApps() {
        let range = RootKey.appRange("ed")
        for folder in ["Data", "Documents", "Inbox"] {
            let k = RootKey.app(id: "ed", folder: folder).description
            XCTAssertTrue(k >= range[0] && k < range[1], k)
        }
        for other in ["app:edit:Documents", "app:e:Documents", "store:ed"] {
            XCTAssertFalse(other >= range[0] && other < range[1], other)
        }
    }

    func testWhereARootShows() {
        let config = DriveConfig(apps: [AppConfig(id: "ed", name: "Editor", isPublic: true), AppConfig(id: "priv", name: "Private", isPublic: false)],
                                 stores: [StoreConfig(name: "work", displayName: "Work", remote: .folder(path: "/srv/work"))])
        XCTAssertEqual(RootKey.store("work").shown(in: config), "Work")
        XCTAssertNil(RootKey.store("gone").shown(in: config))
        XCTAssertEqual(RootKey.app(id: "ed", folder: "Documents").shown(in: config), "Editor")
        XCTAssertEqual(RootKey.app(id: "ed", folder: "Data").shown(in: config), ".by-app/ed/Data")
        XCTAssertEqual(RootKey.app(id: "priv", folder: "Documents").shown(in: config), ".by-app/priv/Documents")
    }
}
